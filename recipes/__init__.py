"""Python that verl imports from the recipe besides tools: constants, tool sets, reward, agent loop."""
