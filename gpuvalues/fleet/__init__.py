"""The fleet: the spec model and the one computation of the whole fleet from it."""
