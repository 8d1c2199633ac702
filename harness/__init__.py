"""The harness: benchmark and experiment harness for context engineering in long-horizon tool-using agents."""
