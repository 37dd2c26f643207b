"""The Pythonic API: descriptor-level calls (cuDNN's model) and the functional layer."""
