"""What the timed engines' records decide: speed, quality, grading, evidence, the sequential test."""
