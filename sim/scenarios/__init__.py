"""Built-in scenario files (a package only so that non-editable installs ship the YAML)."""
