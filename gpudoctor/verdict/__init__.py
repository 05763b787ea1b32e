"""From a Session to the written report: the checks run, their findings ranked, the Report
built, typed and written.

`engine` runs the built-in and plugin checks (`registry`, `plugins`) and ranks the findings
(`gains`); `build` makes the report's JSON dict and `report_model` types it (schema
gpudoctor.report/1, what the renderers read); `judge` is the one judge-and-write path every
command ends with, and `output` plans and writes the report files.
"""
