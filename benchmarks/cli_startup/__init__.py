"""How long the command line takes to answer `--help` and a mistyped flag, against TRL's own command."""
