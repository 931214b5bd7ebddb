"""The measured route: which kernel a default call runs, by pass, head dim, causal, length and
batch x heads (read by kernel/route.py). Nothing measured yet: ``python -m benchmarks.route --table
kernel/route_table.py`` on a GPU writes it.
"""

MEASURED: dict[str, str] = {}
FORWARD: dict[tuple[int, bool, int, int], str] = {}
BACKWARD: dict[tuple[int, bool, int, int], str] = {}
