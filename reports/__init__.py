"""Renderers: each takes the finished report dict (gpudoctor.report) and returns text/bytes.

They never see the engine or the Session object, only the report.
"""
