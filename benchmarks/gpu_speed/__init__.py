"""Study: seconds per informative row against GRPOTrainer at a user's scale on one GPU."""
