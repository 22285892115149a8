"""The normalized identity of what a bundle runs (`normalize`), what it must keep because the
runtime reads it (`rules`), and the dead code and order it drops first (`tidy`)."""
