"""verl tools for the GSM8K recipe, loaded by class path from config/tool_config/*.yaml."""
