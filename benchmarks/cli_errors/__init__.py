"""Study: seconds from starting the command line to its error line."""
