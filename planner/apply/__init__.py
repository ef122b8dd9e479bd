"""The apply walker: steps, write-ahead journal, undo, resume of an interrupted apply."""
