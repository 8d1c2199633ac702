"""Odysseys (ljang0/Odysseys, MIT): long-horizon multi-site web tasks in a real browser."""
