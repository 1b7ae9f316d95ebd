"""Model-card content shared by the variant trainers: tags, paper citations and a table of key settings."""

import os
import textwrap

TRL_VARIANTS_TAG = "trl-variants"

DAPO_PAPER = {
    "title": "DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
    "id": "2503.14476",
    "citation": textwrap.dedent("""\
        @article{yu2025dapo,
            title        = {{DAPO: An Open-Source LLM Reinforcement Learning System at Scale}},
            author       = {Qiying Yu and Zheng Zhang and Ruofei Zhu and Yufeng Yuan and Xiaochen Zuo and Yu Yue and others},
            year         = 2025,
            eprint       = {arXiv:2503.14476},
        }"""),
}

DR_GRPO_PAPER = {
    "title": "Understanding R1-Zero-Like Training: A Critical Perspective",
    "id": "2503.20783",
    "citation": textwrap.dedent("""\
        @article{liu2025understanding,
            title        = {{Understanding R1-Zero-Like Training: A Critical Perspective}},
            author       = {Zichen Liu and Changyu Chen and Wenjun Li and Penghui Qi and Tianyu Pang and Chao Du and Wee Sun Lee and Min Lin},
            year         = 2025,
            eprint       = {arXiv:2503.20783},
        }"""),
}


def settings_section(variant_name: str, settings: dict[str, object]) -> str:
    rows = "\n".join(f"| `{name}` | `{value}` |" for name, value in settings.items())
    return (
        f"\n## {variant_name} settings\n\n"
        f"Trained with [trl-variants](https://pypi.org/project/trl-variants/) `{variant_name}`.\n\n"
        "| setting | value |\n|---|---|\n"
        f"{rows}\n"
    )


class VariantModelCardMixin:
    """Appends the variant's key settings to the model card TRL writes (tags and citation come from `_paper`,
    `_name` and `_tag_names`, which TRL's own model card already uses)."""

    def _variant_settings(self) -> dict[str, object]:
        raise NotImplementedError

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        super().create_model_card(model_name=model_name, dataset_name=dataset_name, tags=tags)
        if not self.is_world_process_zero():
            return
        path = os.path.join(self.args.output_dir, "README.md")
        with open(path, "a", encoding="utf-8") as card:
            card.write(settings_section(self._name, self._variant_settings()))
