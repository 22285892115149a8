"""One module per slot family; each exports `SLOTS`."""
