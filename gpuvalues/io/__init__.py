"""I/O and presentation at the edge: files, output formats, editing values files."""
