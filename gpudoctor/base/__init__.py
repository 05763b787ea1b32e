"""The foundation every layer may use: safe text and durations (`text`), JSON dataclass
fields (`jsonmodel`), bounded reads and atomic writes (`bounded`, `fsutil`), exit codes and
the one-line error (`exitcodes`), and the idle causes the collectors and renderers share."""
