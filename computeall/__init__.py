"""computeall: train transformer language models on a network of ordinary machines."""
