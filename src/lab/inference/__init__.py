"""Inference on user inputs: a reader per kind of input file, a model runner per format, and predictions files."""
