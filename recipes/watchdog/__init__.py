"""The launcher's progress watchdog: a run that stops making progress is noticed, diagnosed and stopped.

watch.py (the watchdog itself) is where to start; the other modules each do one part of it."""
