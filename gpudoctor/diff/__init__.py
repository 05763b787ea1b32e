"""`gpudoctor diff`: two reports compared (`compare`), how much their step times can tell
(`diff_stats`), and the comparison as typed data (`diff_model`, schema gpudoctor.diff/1)."""
