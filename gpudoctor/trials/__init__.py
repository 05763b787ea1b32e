"""`gpudoctor diagnose --try`: apply each remedy from outside the code, re-run, measure.

remedies.py names the remedies and parses ``--try-only``; plan.py maps this run's
findings to the remedies that can be applied without a code change (and says why
not for the others); runner.py re-runs the workload once per remedy under the same
bounds; records.py holds what is kept in the Session; report.py puts it in the report.
This package's __init__ imports nothing: the Session imports records.py.
"""
