from trl_variants import DAPOConfig, DAPOTrainer, DrGRPOConfig, DrGRPOTrainer

from .helpers import toy_config, toy_trainer


def test_dapo_and_dr_grpo_train_two_steps(toy_task, tmp_path):
    for trainer_class, config_class in [(DAPOTrainer, DAPOConfig), (DrGRPOTrainer, DrGRPOConfig)]:
        trainer = toy_trainer(trainer_class, toy_config(config_class, tmp_path / config_class.__name__), toy_task)
        trainer.train()
        assert trainer.state.global_step == 2
