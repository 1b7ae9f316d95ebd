"""The one check every variant trainer makes on `args` before `GRPOTrainer.__init__` sees it."""

from trl.trainer.utils import get_config_model_id


def variant_args(trainer_name: str, config_class: type, model, args, run_suffix: str, why: str):
    """`args` if it is a `config_class`; a default `config_class` named after the model when `args` is `None`.

    Any other config is refused, because a plain `GRPOConfig` lacks the variant's defaults and fields; `why` says
    what the caller would lose.
    """
    if args is None:
        model_name = model if isinstance(model, str) else get_config_model_id(model.config)
        return config_class(f"{model_name.split('/')[-1]}-{run_suffix}")
    if not isinstance(args, config_class):
        raise TypeError(f"{trainer_name}: args must be a {config_class.__name__}, got {type(args).__name__}. {why}")
    return args
