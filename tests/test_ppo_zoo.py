"""``pglab train ppo --zoo ENV_ID`` and ``--defaults sb3``: RL-Zoo's PPO entries as PPOConfigs.

Every entry of the installed rl_zoo3 ``hyperparams/ppo.yml`` whose environment is
registered here translates or is refused naming a key of the entry. Golden entries are
checked field by field against the SB3 ``PPO`` object RL-Zoo's own ExperimentManager
builds from the same entry (schedules, rollout and update settings, networks,
VecNormalize); ``--defaults sb3`` against SB3's PPO with nothing set. Then: command-line
flags over an entry, a refused key on the command line, SB3's per-minibatch target_kl
rule in the update loop.
"""

from __future__ import annotations

import argparse
import math
import os

import numpy as np
import pytest
import torch
import yaml

pytest.importorskip("rl_zoo3")

from pglab.algos.onpolicy import OnPolicyBatch, onpolicy_update  # noqa: E402
from pglab.algos.ppo import env_options  # noqa: E402
from pglab.cli import main  # noqa: E402
from pglab.commands.ppo import train_config  # noqa: E402
from pglab.configs.ppo import (  # noqa: E402
    SB3_DEFAULTS,
    OnPolicyHyperparams,
    PPOConfig,
    schedule_at,
    vf_coef_from_value_coef,
)
from pglab.configs.zoo import gym_spec, installed_zoo_file, read_zoo_file, zoo_config  # noqa: E402
from pglab.envs.registry import make_env  # noqa: E402
from pglab.errors import ConfigError  # noqa: E402
from pglab.nets.actor_critic import CategoricalActorCritic, build_actor_critic  # noqa: E402
from pglab.run.config import make_config  # noqa: E402

REPRESENTATIVE = {"atari": "PongNoFrameskip-v4", "default": "InvertedPendulum-v4"}
"""The environment id each entry that names no environment is read for."""

REFUSED = {"CarRacing-v3": "policy"}
"""The installed entries pglab refuses, and the key each refusal names."""


# --------------------------------------------------------------------------------------
# Every installed entry
# --------------------------------------------------------------------------------------
def test_every_installed_entry_translates_or_is_refused_naming_its_key():
    table = read_zoo_file()
    translated, refused, unregistered = [], {}, []
    for name, entry in table.items():
        env_id = REPRESENTATIVE.get(name, name)
        if gym_spec(env_id) is None:
            unregistered.append(name)
            continue
        try:
            config = zoo_config(env_id)
        except ConfigError as exc:
            key = exc.field.partition(".")[0].partition("[")[0]
            assert key in entry, (name, str(exc))
            refused[name] = exc.field
            continue
        assert isinstance(config, PPOConfig)
        translated.append(name)
    # pybullet's and minigrid's ids are not registered here; the count keeps the skip honest
    assert len(unregistered) == sum("Bullet" in name or "MiniGrid" in name for name in table)
    assert refused == REFUSED
    assert len(translated) == len(table) - len(unregistered) - len(refused) >= 20


def test_an_unknown_key_is_refused_by_name_on_the_command_line(tmp_path, capsys):
    zoo_file = tmp_path / "ppo.yml"
    zoo_file.write_text(yaml.safe_dump({"Pendulum-v1": {"n_steps": 64, "policy_delay": 2}}))
    run_dir = tmp_path / "run"
    tiny = ["--total-steps", "64", "--num-steps", "64", "--eval-episodes", "0", "--no-tensorboard"]
    code = main(["train", "ppo", "--zoo", "Pendulum-v1", "--zoo-file", str(zoo_file), "--log-dir", str(run_dir), *tiny])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("pglab: error: policy_delay: ")
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ({"policy_kwargs": "dict(use_expln=True)"}, "policy_kwargs.use_expln"),
        ({"policy_kwargs": "dict(squash_output=True)"}, "policy_kwargs.squash_output"),
        ({"policy_kwargs": "dict(activation_fn=nn.LeakyReLU)"}, "policy_kwargs.activation_fn"),
        ({"policy_kwargs": "dict(net_arch=__import__('os'))"}, "policy_kwargs"),
        ({"clip_range_vf": 0.2}, "clip_range_vf"),
        ({"learning_rate": "exp_0.1"}, "learning_rate"),
        ({"normalize": "dict(norm_obs_keys=['a'])"}, "normalize.norm_obs_keys"),
        ({"n_steps": 0}, "n_steps"),
    ],
)
def test_keys_pglab_cannot_express_are_refused_by_name(tmp_path, entry, key):
    zoo_file = tmp_path / "ppo.yml"
    zoo_file.write_text(yaml.safe_dump({"Pendulum-v1": entry}))
    with pytest.raises(ConfigError) as caught:
        zoo_config("Pendulum-v1", zoo_file)
    assert caught.value.field == key


# --------------------------------------------------------------------------------------
# Golden entries: RL-Zoo's own SB3 PPO from the same entry
# --------------------------------------------------------------------------------------
CUSTOM_ENTRY = {
    "n_envs": 2,
    "n_timesteps": 5000.0,
    "policy": "MlpPolicy",
    "n_steps": 48,
    "batch_size": 40,
    "learning_rate": "lin_3e-3",
    "clip_range": 0.3,
    "vf_coef": 0.7,
    "target_kl": 0.02,
    "normalize_advantage": False,
    "normalize": "{'norm_obs': False, 'norm_reward': True, 'gamma': 0.95, 'clip_reward': 5.0}",
    "env_wrapper": [{"gymnasium.wrappers.TimeLimit": {"max_episode_steps": 50}}],
    "policy_kwargs": "dict(net_arch=dict(pi=[32], vf=[16, 24]), activation_fn=nn.ELU, log_std_init=-0.5)",
}
"""An entry with a normalize mapping (its own gamma), a net_arch mapping of different
sizes, a wrapper with arguments, target_kl and a batch_size that does not divide the rollout."""


@pytest.fixture(scope="module")
def zoo_file(tmp_path_factory):
    """The installed file plus :data:`CUSTOM_ENTRY` (for Pendulum-v1)."""
    table = read_zoo_file()
    table["Pendulum-v1"] = CUSTOM_ENTRY
    path = tmp_path_factory.mktemp("zoo") / "ppo.yml"
    path.write_text(yaml.safe_dump(table))
    return {"installed": installed_zoo_file(), "custom": path}


def sb3_model(env_id: str, zoo_file, folder):
    """RL-Zoo's ExperimentManager's PPO for ``env_id`` from ``zoo_file`` (its own pipeline:
    read, preprocess, make the envs and the model), with its wrapper and VecNormalize."""
    from rl_zoo3.exp_manager import ExperimentManager

    manager = ExperimentManager(
        argparse.Namespace(), "ppo", env_id, str(folder), config=str(zoo_file), eval_freq=-1, verbose=0, device="cpu"
    )
    model, _ = manager.setup_experiment()
    return model, manager


GOLDEN = [("CartPole-v1", "installed"), ("HalfCheetah-v4", "installed"), ("Pendulum-v1", "custom")]


@pytest.mark.parametrize(("env_id", "source"), GOLDEN)
def test_golden_entries_match_rl_zoos_own_sb3_model(env_id, source, zoo_file, tmp_path, capsys):
    model, manager = sb3_model(env_id, zoo_file[source], tmp_path)
    config = zoo_config(env_id, zoo_file[source])
    assert config.total_steps == manager.n_timesteps and config.num_envs == model.n_envs
    assert_update_settings_match(config, model)
    assert_networks_match(config, model)
    assert_normalization_matches(config, model)
    if source == "custom":  # RL-Zoo's wrapper, with its argument, cuts pglab's episodes too
        assert config.env_wrappers == ("gymnasium.wrappers.TimeLimit(max_episode_steps=50)",)
        env = make_env(config.env, 2, **env_options(config))
        env.reset(seed=0)
        truncs = [env.step(torch.zeros(2, 1))[3] for _ in range(50)]
        env.close()
        assert not any(t.any() for t in truncs[:-1]) and truncs[-1].all()


def test_defaults_sb3_are_sb3s_own_defaults(zoo_file, tmp_path):
    # RL-Zoo's "default" entry sets nothing but n_timesteps and the policy: SB3's PPO defaults
    model, _ = sb3_model(REPRESENTATIVE["default"], zoo_file["installed"], tmp_path)
    config, given = train_config(["--defaults", "sb3", "--env", "gym:InvertedPendulum-v4"])
    assert given == {"env"}
    assert_update_settings_match(config, model)
    assert_networks_match(config, model)
    assert_normalization_matches(config, model)
    assert config.num_envs == model.n_envs == 1
    # ... and --defaults cleanrl keeps the dataclass's own defaults
    assert train_config(["--defaults", "cleanrl"])[0] == PPOConfig()


def assert_update_settings_match(config: PPOConfig, model) -> None:
    hp = config.update
    for progress in (1.0, 0.7, 0.25, 0.01):
        assert config.lr * schedule_at(config.lr_schedule, progress) == pytest.approx(model.lr_schedule(progress))
        assert hp.clip_coef * schedule_at(hp.clip_schedule, progress) == pytest.approx(model.clip_range(progress))
    assert config.num_steps == model.n_steps and hp.minibatch_size == model.batch_size
    assert hp.ppo_epochs == model.n_epochs
    assert (hp.gamma, hp.gae_lambda, hp.entropy_coef) == pytest.approx((model.gamma, model.gae_lambda, model.ent_coef))
    assert vf_coef_from_value_coef(hp.value_coef) == pytest.approx(model.vf_coef)
    assert hp.max_grad_norm == pytest.approx(model.max_grad_norm)
    assert hp.target_kl == model.target_kl and hp.kl_stop == "minibatch"
    assert hp.normalize_advantages == model.normalize_advantage and hp.value_clip_coef is model.clip_range_vf
    assert (config.use_sde, config.sde_sample_freq) == (model.use_sde, model.sde_sample_freq)
    assert config.adam_eps == model.policy.optimizer.defaults["eps"]


def _hidden_sizes(mlp) -> list[int]:
    return [layer.out_features for layer in mlp if isinstance(layer, torch.nn.Linear)]


def assert_networks_match(config: PPOConfig, model) -> None:
    """pglab's actor and critic built from the config have SB3's hidden layers, activation,
    initialisation and log-std parameter."""
    policy = model.policy
    box = model.action_space.shape is not None and len(model.action_space.shape) > 0
    obs_dim = int(math.prod(model.observation_space.shape))
    net = build_actor_critic(
        obs_dim,
        "continuous" if box else "discrete",
        int(model.action_space.shape[0]) if box else int(model.action_space.n),
        config.hidden_dims,
        activation=config.activation,
        log_std_init=config.log_std_init,
        ortho_init=config.ortho_init,
        use_sde=config.use_sde,
        critic_hidden_dims=config.critic_hidden_dims,
    )
    assert _hidden_sizes(net.actor)[:-1] == _hidden_sizes(policy.mlp_extractor.policy_net)
    assert _hidden_sizes(net.critic)[:-1] == _hidden_sizes(policy.mlp_extractor.value_net)
    assert {type(m) for m in net.actor if not isinstance(m, torch.nn.Linear)} == {policy.activation_fn}
    assert config.ortho_init == policy.ortho_init
    if box:
        assert net.log_std.shape == policy.log_std.shape
        assert torch.equal(net.log_std.detach(), policy.log_std.detach())


def assert_normalization_matches(config: PPOConfig, model) -> None:
    normalized = model.get_vec_normalize_env()
    if normalized is None:
        assert not config.normalizes
        return
    gamma = config.update.gamma if config.normalize_gamma is None else config.normalize_gamma
    assert (config.normalize_obs, config.normalize_reward) == (normalized.norm_obs, normalized.norm_reward)
    assert (config.clip_obs, config.clip_reward, gamma, config.normalize_epsilon) == pytest.approx(
        (normalized.clip_obs, normalized.clip_reward, normalized.gamma, normalized.epsilon)
    )


# --------------------------------------------------------------------------------------
# The command line over an entry
# --------------------------------------------------------------------------------------
def test_flags_override_the_zoo_entry():
    config, given = train_config(["--zoo", "CartPole-v1", "--gamma", "0.5", "--lr-schedule", "constant"])
    assert (config.update.gamma, config.lr_schedule, config.lr) == (0.5, "constant", 0.001)  # lr from the entry
    assert (config.num_envs, config.num_steps, config.update.minibatch_size) == (8, 32, 256)
    assert {"update.gamma", "num_steps", "update.minibatch_size", "lr"} <= given
    # --num-minibatches over the entry's batch_size: the flag counts
    config, _ = train_config(["--zoo", "CartPole-v1", "--num-minibatches", "2"])
    assert (config.update.num_minibatches, config.update.minibatch_size) == (2, None)
    with pytest.raises(ConfigError, match="minibatch_size"):
        train_config(["--zoo", "CartPole-v1", "--num-minibatches", "2", "--minibatch-size", "16"])


def test_a_zoo_file_entry_needs_zoo_and_sb3_defaults(tmp_path):
    with pytest.raises(ConfigError, match="zoo_file"):
        train_config(["--zoo-file", str(tmp_path / "x.yml")])
    with pytest.raises(ConfigError, match="defaults"):
        train_config(["--zoo", "CartPole-v1", "--defaults", "cleanrl"])
    with pytest.raises(ConfigError, match="zoo: is not a registered"):
        train_config(["--zoo", "NoSuchEnv-v0"])


@pytest.mark.parametrize(("typed", "meant"), [("CartPol-v1", "CartPole-v1"), ("hopper-v4", "Hopper-v4")])
def test_a_mistyped_zoo_id_is_refused_with_the_closest_id(typed, meant):
    with pytest.raises(ConfigError, match=rf"^zoo: is not a registered .*; did you mean {meant}\? \(got '{typed}'\)$"):
        train_config(["--zoo", typed])
    with pytest.raises(ConfigError) as refused:
        train_config(["--zoo", "Qwxz-v0"])
    assert "did you mean" not in str(refused.value)


def test_a_malformed_zoo_file_is_one_line_naming_the_file_and_the_place(tmp_path, capsys):
    bad = tmp_path / "bad.yml"
    bad.write_text("CartPole-v1:\n  n_envs: 8\n  policy: a: b\n")
    assert main(["train", "ppo", "--zoo", "CartPole-v1", "--zoo-file", str(bad), "--log-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unicode string" not in err
    assert err.startswith("pglab: error: zoo_file: is not YAML that pglab reads safely (") and "line 3, column" in err
    assert str(bad) in err and not (tmp_path / "r").exists()


def test_a_registered_id_this_gymnasium_cannot_make_is_refused_in_one_line(tmp_path, capsys):
    # RL-Zoo's -v2 MuJoCo entries: gymnasium registers the ids but has moved their code out
    code = main(["train", "ppo", "--zoo", "InvertedPendulum-v2", "--log-dir", str(tmp_path / "r")])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("pglab: error:")]
    assert code == 2 and len(errors) == 1
    assert errors[0].startswith("pglab: error: env: cannot be made here (") and "gymnasium-robotics" in errors[0]
    assert not (tmp_path / "r").exists()


def test_sb3_defaults_are_one_set():
    config = make_config(PPOConfig, **SB3_DEFAULTS)
    assert (config.lr, config.num_steps, config.update.minibatch_size, config.update.ppo_epochs) == (3e-4, 2048, 64, 10)
    assert os.path.basename(installed_zoo_file()) == "ppo.yml"


# --------------------------------------------------------------------------------------
# SB3's target_kl rule in the update loop
# --------------------------------------------------------------------------------------
def test_the_minibatch_kl_rule_stops_before_the_step_that_would_exceed_it():
    torch.manual_seed(0)
    net = CategoricalActorCritic(3, 4, (8,)).double()
    obs = torch.randn(32, 3, dtype=torch.float64)
    with torch.no_grad():
        actions = net.act(obs)[0]
        log_probs, _, values = net.evaluate_actions(obs, actions)
    batch = OnPolicyBatch(log_probs, torch.randn(32, dtype=torch.float64) * 5, values, values)
    target = 0.01
    hp = OnPolicyHyperparams(ppo_epochs=50, minibatch_size=8, target_kl=target, kl_stop="minibatch")
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)  # small steps: the KL grows over many minibatches
    steps, kls = [0], []
    step = optimizer.step

    def counted_step(*args, **kwargs):
        steps[0] += 1
        return step(*args, **kwargs)

    optimizer.step = counted_step  # type: ignore[method-assign]  # counts the steps taken

    def evaluate(index):
        new_log_probs, entropy, new_values = net.evaluate_actions(obs[index], actions[index])
        with torch.no_grad():
            log_ratio = new_log_probs - log_probs[index]
            kls.append(float(((log_ratio.exp() - 1) - log_ratio).mean()))
        return new_log_probs, entropy, new_values

    metrics = onpolicy_update(evaluate, batch, net.parameters(), optimizer, hp, generator=torch.Generator())
    # every minibatch evaluated took its step except the last: the first over 1.5 x target_kl
    assert len(kls) == steps[0] + 1 and 0 < steps[0] < 50 * 4
    assert max(kls[:-1]) <= 1.5 * target < kls[-1]
    assert any(k > target for k in kls[:-1])  # minibatches over target_kl, not over 1.5 x, took their steps
    assert metrics["stats/epochs"] == steps[0] // 4 + 1


# --------------------------------------------------------------------------------------
# The MuJoCo comparison: bench/ppo_zoo_returns.py and the ids --zoo reads
# --------------------------------------------------------------------------------------
def _bench_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "bench" / "ppo_zoo_returns.py"
    spec = importlib.util.spec_from_file_location("ppo_zoo_returns", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(library, seed, mean, env="Swimmer-v4"):
    measured = {"env_steps": 1000, "mean": mean, "sem": 1.0, "cpu_s": 2.0, "load_avg_1min": [1.0, 1.0], "commit": "c"}
    return {"env": env, "library": library, "seed": seed, **measured}


def test_the_returns_summary_holds_pglab_to_sb3_within_one_standard_error():
    bench = _bench_module()
    sb3 = [_run("sb3", seed, mean) for seed, mean in ((11, 100.0), (12, 110.0), (13, 120.0))]
    # SB3: mean 110, s.e. 10/sqrt(3); pglab's s.e. the same: one s.e. of the difference is 8.16
    close = [_run("pglab", seed, mean - 8.0) for seed, mean in ((11, 100.0), (12, 110.0), (13, 120.0))]
    far = [_run("pglab", seed, mean - 8.5) for seed, mean in ((11, 100.0), (12, 110.0), (13, 120.0))]
    summary = bench.summarize(sb3 + close, ["Swimmer-v4"], [11, 12, 13])["Swimmer-v4"]
    assert summary["sb3"]["mean"] == pytest.approx(110.0) and summary["sb3"]["sem"] == pytest.approx(10 / math.sqrt(3))
    assert summary["difference_sem"] == pytest.approx(math.sqrt(2) * 10 / math.sqrt(3))
    assert summary["pglab_holds"] is True and summary["pglab"]["per_seed"] == [92.0, 102.0, 112.0]
    assert bench.summarize(sb3 + far, ["Swimmer-v4"], [11, 12, 13])["Swimmer-v4"]["pglab_holds"] is False
    # one seed: no standard error, no verdict (JSON null, not NaN)
    single = bench.summarize(sb3[:1] + close[:1], ["Swimmer-v4"], [11])["Swimmer-v4"]
    assert single["sb3"]["sem"] is None and single["pglab_holds"] is None


def test_zoo_reads_the_mujoco_entry_of_the_id_it_is_given():
    # the file's MuJoCo entries are -v4 ids, which gymnasium still makes; a -v5 id has no
    # entry and takes RL-Zoo's default one, as RL-Zoo's own lookup does
    pytest.importorskip("mujoco")
    tuned = zoo_config("HalfCheetah-v4")
    assert tuned.env == "gym:HalfCheetah-v4" and tuned.hidden_dims == (256, 256) and tuned.update.ppo_epochs == 20
    v5, _ = train_config(["--zoo", "HalfCheetah-v5"])
    assert v5.env == "gym:HalfCheetah-v5" and v5.hidden_dims == (64, 64) and v5.update.ppo_epochs == 10
    # the -v4 entry on the -v5 environment: --env over the entry
    over, _ = train_config(["--zoo", "HalfCheetah-v4", "--env", "gym:HalfCheetah-v5"])
    assert over.env == "gym:HalfCheetah-v5" and over.hidden_dims == (256, 256)


def test_vector_env_copies_return_no_info_and_snapshots_hold_the_wrappers_asked_for():
    env = make_env("gym:Pendulum-v1", 2, vectorization="sync", max_episode_steps=3)
    env.reset(seed=0)
    infos = [env.env.step(np.zeros((2, 1), dtype=np.float32))[4] for _ in range(3)]
    # the copies' own keys are gone; the vector env's final observations remain
    assert infos[0] == {} and set(infos[2]) >= {"final_obs", "_final_obs"} and "final_info" in infos[2]
    assert infos[2]["final_info"] == {}
    layers = [layer["type"] for layer in env.state_dict()["layers"]]
    assert layers[0] == "SyncVectorEnv" and "WithoutInfo" not in layers
    # each copy: TimeLimit, OrderEnforcing, PassiveEnvChecker, PendulumEnv
    assert len(layers) == 1 + 2 * 4
    env.close()


@pytest.mark.parametrize("start", [["--zoo", "CartPole-v1"], ["--defaults", "sb3"], ["--zoo-file", "x.yml"]])
def test_resume_refuses_the_flags_that_choose_where_a_new_run_starts(tmp_path, capsys, start):
    # the entry's n_timesteps would count as given and stretch the stored run's budget
    code = main(["train", "ppo", "--resume", str(tmp_path / "run"), *start])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"pglab: error: {start[0][2:].replace('-', '_')}: chooses where a new run starts; --resume")
