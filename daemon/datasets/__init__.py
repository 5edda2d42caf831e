"""Datasets: named prompt sets to benchmark on (a captured window, an imported file), replayed with their
own sampling parameters, categories and arrival times."""
