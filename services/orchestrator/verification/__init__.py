"""Spot checks of a session's results: which items are checked (`stream`), who is wrong when a
recomputation disagrees (`judge`), and the checks themselves, overlapping training (`checks`)."""
