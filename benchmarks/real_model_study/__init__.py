"""Study: the real-model evidence that can decide (method in docs/results/real_model_study_method.md)."""
