"""The model an arena serves: synthetic or trained checkpoints, real ones the operator names, prompts."""
