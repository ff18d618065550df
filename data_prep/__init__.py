"""GSM8K -> parquet for verl: run `python data_prep/gsm8k.py`."""
