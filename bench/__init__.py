"""Speed benchmarks (make bench): figures and ratios printed, never asserted."""
