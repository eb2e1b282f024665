"""The built-in labelled corpus: correct controls and seeded bug variants, with bug class and trigger."""
