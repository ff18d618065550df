"""Stop = save: a signal to the launcher becomes "finish the step, save a checkpoint, exit", and the same command
resumes. `stop_request.py` holds the files the launcher and the trainer pass each other (standard library only: the
launcher imports it); `trainer.py` is verl's legacy trainer with the step-boundary stop; `main_ppo.py` is the entry
the launcher runs instead of verl's, the same program with the recipe's TaskRunner."""
