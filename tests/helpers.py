"""Small, fast trainer settings for tests on the toy task."""

TEST_DEFAULTS = dict(
    use_cpu=True,
    bf16=False,
    per_device_train_batch_size=16,
    num_generations=4,
    max_completion_length=6,
    learning_rate=1e-3,
    max_steps=2,
    logging_steps=1,
    report_to=[],
    save_strategy="no",
    seed=0,
)


def toy_config(config_class, output_dir, **overrides):
    """A config of `config_class` (GRPOConfig, DAPOConfig or DrGRPOConfig) sized for the toy task."""
    return config_class(str(output_dir), **{**TEST_DEFAULTS, **overrides})


def toy_trainer(trainer_class, config, task, **kwargs):
    return trainer_class(
        task.model,
        kwargs.pop("reward_funcs", task.reward_funcs),
        args=config,
        train_dataset=kwargs.pop("train_dataset", task.train_dataset),
        processing_class=task.tokenizer,
        **kwargs,
    )
