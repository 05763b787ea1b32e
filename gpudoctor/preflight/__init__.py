"""`gpudoctor preflight`: a machine and job audit, as a checklist CI can gate on.

    probes (gpu, links, host, env: read the machine, never change it)
        -> items (pass | warn | fail | not-checked, each with what was found and expected)
        -> policy (thresholds from pyproject.toml or --policy; job items from a bounded diagnose run)
        -> report dict (schema gpudoctor.preflight/1) -> renderers (terminal, JSON, JUnit, HTML)

The catalog of items (IDs, slugs, why each matters, how to fix it, where the
threshold comes from) is `gpudoctor.preflight.items`.
"""
