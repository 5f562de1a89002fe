"""The forecasting game, its state keys, its loops and its data sources."""

import io
import sys
from pathlib import Path

import numpy as np
import pytest

from pglab.algos.tabular import IterativeFeedbackLoop, QTableAgent, RADversarialTrainer, TrainingLoop, WoLFPHCAgent
from pglab.data import ForecastSeries, load_series, read_fred_csv
from pglab.envs.forecast_game import (
    ForecastGame,
    ForecastState,
    HashStateKey,
    ScaledStateKey,
    SimulationConfig,
    _state_hash,
    adversary_space,
    encoder_from_dict,
    forecaster_space,
    state_at,
)
from pglab.errors import ConfigError, DataError, MissingExtraError
from pglab.run.config import make_config

DATA = Path(__file__).parent / "data"


class Constant:
    """A player that always picks the same action."""

    def __init__(self, action):
        self.action = action

    def act(self, state_key, explore=True):
        return self.action


def ramp(n=30):
    y = np.arange(n) * 0.5 + 3.0
    return ForecastSeries(y, np.sin(np.arange(n)), tuple(f"t{i}" for i in range(n)), "ramp")


# --- state keys ------------------------------------------------------------------------------
def test_state_hash_is_the_fixed_width_formula():
    # v = int((5.1 % 100) / 2) % 50 = 2; e = int((2.49 + 5) * 5) % 50 = 37
    assert _state_hash(ForecastState(5.1, 2.49, 0)) == 2 * 50 + 37
    # value 250.0: int(50 / 2) = 25; exogenous -7: int(-10) = -10 -> -10 % 50 = 40
    assert _state_hash(ForecastState(250.0, -7.0, 0)) == 25 * 50 + 40
    assert HashStateKey(10)(ForecastState(5.1, 2.49, 0)) == 2 * 10 + 7
    assert all(0 <= _state_hash(ForecastState(v, x, 0)) < 2500 for v in (-3.0, 0.0, 99.9) for x in (-20.0, 0.0, 40.0))


def test_scaled_key_buckets_hold_equal_shares_of_the_training_window():
    series = load_series("synthetic", seed=3, n_rows=401)
    key = ScaledStateKey.fit(series, 4)
    keys = [key(state_at(series, t)) for t in range(1, len(series))]
    counts = np.bincount([k // 4 for k in keys], minlength=4)  # change buckets
    assert counts.tolist() == [100, 100, 100, 100]
    counts = np.bincount([k % 4 for k in keys], minlength=4)  # driver buckets
    assert counts.tolist() == [100, 100, 100, 100]
    assert encoder_from_dict(key.to_dict()) == key
    with pytest.raises(ConfigError, match="state_encoder"):
        encoder_from_dict({"kind": "scaled", "change_edges": [0.0], "exogenous_edges": []})


# --- the game --------------------------------------------------------------------------------
def test_rewards_are_minus_absolute_error_of_the_perturbed_outcome():
    series = ramp()
    config = SimulationConfig(horizon=5, adversary_bins=5, adversary_max=0.2, state_key="hash")
    game = ForecastGame(config, seed=11, series=series)
    logs = game.run(Constant(15), Constant(0))  # delta +0.5, perturbation -0.2
    assert len(logs) == 5 and logs[0].state.t == game.start
    for tr in logs:
        t = tr.state.t
        assert tr.forecast == pytest.approx(series.target[t] + 0.5)
        assert tr.realised == pytest.approx(series.target[t + 1] - 0.2)
        assert tr.reward == pytest.approx(-abs(series.target[t + 1] - 0.2 - series.target[t] - 0.5))
        assert tr.next_state.t == t + 1 and tr.state.change == pytest.approx(0.5)
    assert [tr.next_state.t for tr in logs[:-1]] == [tr.state.t for tr in logs[1:]]


def test_episode_start_is_seeded_and_too_short_series_is_rejected():
    config = SimulationConfig(horizon=5, state_key="hash")
    starts = {ForecastGame(config, s, ramp()).start for s in range(50)}
    assert min(starts) >= 1 and max(starts) <= 30 - 1 - 5 and len(starts) > 5
    assert ForecastGame(config, 7, ramp()).start == ForecastGame(config, 7, ramp()).start
    with pytest.raises(DataError, match="horizon=40"):
        ForecastGame(SimulationConfig(horizon=40), 0, ramp())


@pytest.mark.parametrize("field, value", [("horizon", 0), ("state_key", "md5"), ("adversary_max", -1.0), ("n_bins", 1)])
def test_simulation_config_rejects_bad_fields(field, value):
    with pytest.raises(ConfigError, match=field):
        SimulationConfig(**{field: value})


# --- loops -----------------------------------------------------------------------------------
def test_q_learning_on_a_deterministic_ramp_learns_the_exact_delta():
    """y rises by exactly 0.5 every step: the optimal delta is +0.5 (bin 15) in every state."""
    config = SimulationConfig(horizon=10, state_key="hash")
    agent = QTableAgent(forecaster_space(config), gamma=0.0, seed=0, epsilon_decay=0.999)
    summary = TrainingLoop(config, n_episodes=300, seed=1).run(agent, series=ramp(40))
    keys = {tr.state_key for tr in ForecastGame(config, 0, ramp(40)).run(Constant(0))}
    assert all(agent.act(k, explore=False) == 15 for k in keys)
    assert set(summary) >= {
        "n_episodes",
        "final_epsilon",
        "mean_reward_last_50",
        "mean_td_error_last_100",
        "rewards_history",
    }
    assert summary["n_episodes"] == 300 and len(summary["rewards_history"]) == 300
    # Episode 0 plays uniformly (epsilon 1; learning follows the episode): E|0.5 - delta| over the
    # 21 deltas is 13.5 / 21 = 0.643. Over the last 50 episodes epsilon falls from 0.08 to 0.05
    # and the greedy error is 0: about -0.065 * 0.643 = -0.04 a round, while a forecaster one bin
    # off scores -0.1 at best.
    assert summary["rewards_history"][0] < -0.4
    assert -0.1 < summary["mean_reward_last_50"] < -0.02
    assert summary["final_epsilon"] == 0.05


def test_training_loop_in_two_halves_equals_one_run():
    config = SimulationConfig(horizon=8)
    series = load_series("synthetic", seed=1, n_rows=60)

    def agents():
        return QTableAgent(forecaster_space(config), seed=2), QTableAgent(adversary_space(config), seed=3)

    f1, a1 = agents()
    full = TrainingLoop(config, 20, seed=5)
    full.run(f1, a1, series=series)
    f2, a2 = agents()
    split = TrainingLoop(config, 20, seed=5)
    split.run(f2, a2, series=series, stop=9)
    split.run(f2, a2, series=series)
    assert split.rewards_history == full.rewards_history
    assert np.array_equal(f1.q, f2.q) and np.array_equal(a1.q, a2.q) and f1.epsilon == f2.epsilon


def test_rarl_alternates_and_freezes_the_other_player():
    config = SimulationConfig(horizon=6)
    series = load_series("synthetic", seed=2, n_rows=50)
    forecaster, adversary = QTableAgent(forecaster_space(config), seed=0), QTableAgent(adversary_space(config), seed=1)
    trainer = RADversarialTrainer(config, alternation_schedule=3, total_epochs=12, seed=0)
    snapshots = []
    trainer.run(forecaster, adversary, series=series, stop=3)
    snapshots.append((forecaster.n_updates, adversary.n_updates))
    trainer.run(forecaster, adversary, series=series, stop=6)
    snapshots.append((forecaster.n_updates, adversary.n_updates))
    result = trainer.run(forecaster, adversary, series=series)
    assert snapshots == [(18, 0), (18, 18)]
    assert (forecaster.n_updates, adversary.n_updates) == (36, 36)
    assert [r["training"] for r in result["epoch_results"]] == ["forecaster"] * 3 + ["adversary"] * 3 + [
        "forecaster"
    ] * 3 + ["adversary"] * 3
    assert result["total_epochs"] == 12 and result["alternation_schedule"] == 3


@pytest.mark.parametrize("algo", ["q", "wolf", "rarl"])
def test_make_agents_builds_the_configured_learners(algo):
    """Every learner setting reaches the agent it is meant for (WoLF's two rates not swapped;
    the RARL adversary on its own action grid, seeded apart from the forecaster)."""
    from pglab.algos.forecast import make_agents
    from pglab.configs.forecast import ForecastTrainConfig

    config = make_config(
        ForecastTrainConfig,
        algo=algo,
        source="synthetic",
        alpha=0.3,
        gamma=0.2,
        epsilon=0.9,
        epsilon_decay=0.98,
        epsilon_min=0.1,
        delta_win=0.02,
        delta_lose=0.07,
        seed=5,
        n_bins=11,
        adversary_bins=7,
    )
    forecaster, adversary = make_agents(config)
    learner = {"alpha": 0.3, "gamma": 0.2, "epsilon_decay": 0.98, "epsilon_min": 0.1}
    expected = {**learner, "seed": 5, "default_action": 5}  # bin 5 of 11 is delta 0: the random walk
    if algo == "wolf":
        assert type(forecaster) is WoLFPHCAgent
        expected.update(delta_win=0.02, delta_lose=0.07)
    else:
        assert type(forecaster) is QTableAgent
    assert forecaster.hyperparameters() == expected
    assert forecaster.epsilon == 0.9 and forecaster.n_actions == 11
    if algo != "rarl":
        assert adversary is None
        return
    assert adversary is not None and type(adversary) is QTableAgent
    assert adversary.n_actions == 7 and adversary.epsilon == 0.9
    assert adversary.hyperparameters() == {**learner, "seed": 6, "default_action": 3}  # bin 3 of 7: no perturbation


def test_feedback_loop_learns_only_from_realised_pairs_in_order():
    encoder = HashStateKey()
    agent = QTableAgent(21, alpha=1.0, gamma=0.0, epsilon=0.0, epsilon_min=0.0)
    loop = IterativeFeedbackLoop(encoder=encoder)
    s0, s1, s2 = ForecastState(5.0, 0.0, 0), ForecastState(5.3, 1.0, 1), ForecastState(5.1, 2.0, 2)
    first = loop.update_from_realized(agent, [(s0, 5.2, 5.3)])
    assert first["n_updates"] == 0 and agent.n_updates == 0  # waits for its next state
    second = loop.update_from_realized(agent, [(s1, 5.3, 5.1), (s2, 5.0, 4.8)])
    assert second["n_updates"] == 2
    # alpha = 1, gamma = 0: Q(s, a) equals the realised reward exactly
    assert agent.q_values(encoder(s0))[12] == pytest.approx(-0.1)  # delta +0.2 = bin 12
    assert agent.q_values(encoder(s1))[10] == pytest.approx(-0.2)  # delta 0 = bin 10
    assert second["mean_reward"] == pytest.approx(-0.15)


# --- data sources ----------------------------------------------------------------------------
def test_synthetic_is_seeded_and_macrodata_defaults():
    a, b, c = load_series("synthetic", seed=4), load_series("synthetic", seed=4), load_series("synthetic", seed=5)
    assert np.array_equal(a.target, b.target) and not np.array_equal(a.target, c.target)
    macro = load_series("macrodata")
    assert len(macro) == 202 and macro.dates[0] == "1959Q2" and macro.dates[-1] == "2009Q3"
    assert macro.target[0] == 5.1  # unemployment 1959Q2
    assert macro.exogenous[0] == pytest.approx(100 * np.log(2778.801 / 2710.349))  # real GDP growth 1959Q2


def test_fred_csv_with_missing_values_and_explicit_columns():
    series = load_series(f"csv:{DATA / 'fred_download.csv'}")
    assert len(series) == 35 and "1 rows dropped" in series.name  # row 9 has "." in the driver
    assert series.target[0] == 3.4 and series.dates[0] == "1948-01-01"
    frame, _ = read_fred_csv(DATA / "fred_download.csv")
    assert np.isnan(frame["GDPGROWTH"].iloc[8])
    own = load_series(f"csv:{DATA / 'fred_download.csv'}", target="UNRATE", driver="UNRATE_diff")
    assert own.exogenous[0] == pytest.approx(0.4)


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "empty"),
        ("DATE,UNRATE\n", "no data rows"),
        ("DATE,UNRATE\n2020-01-01,3.5\n2020-02-01,n/a\n", "row 3 holds 'n/a', not a number"),
        ("DATE\n2020-01-01\n", "needs a date column and at least one value column"),
        ("DATE,UNRATE\n2020-01-01,3.5\n2020-02-01,.\n", "only 0 rows"),
    ],
)
def test_bad_csv_files_raise_data_errors(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        load_series(f"csv:{path}")


def test_unknown_source_and_missing_column():
    with pytest.raises(DataError, match=r"source: .*\(got 'yahoo'\)"):
        load_series("yahoo")
    with pytest.raises(DataError, match="no column 'gdp'"):
        load_series("macrodata", driver="gdp")


def test_fred_source_parses_a_recorded_api_response(monkeypatch):
    """fredapi end to end, with urlopen answering from a file in FRED's XML format."""
    fred_module = pytest.importorskip("fredapi.fred")
    requested = []

    def fake_urlopen(url):
        requested.append(url)
        return io.BytesIO((DATA / "fred_unrate_observations.xml").read_bytes())

    monkeypatch.setattr(fred_module, "urlopen", fake_urlopen)
    monkeypatch.setenv("FRED_API_KEY", "test-key")
    series = load_series("auto")  # the key is set: auto means fred
    assert "series_id=UNRATE" in requested[0] and requested[0].endswith("api_key=test-key")
    # 36 observations: June 1948 is "." (dropped), and the driver (the previous change) is
    # undefined for the first month and for July 1948, after the gap.
    assert len(series) == 33 and series.dates[0] == "1948-02-01" and "1948-07-01" not in series.dates
    assert series.target[0] == 3.8 and series.exogenous[0] == pytest.approx(0.4)


def test_fred_without_fredapi_or_key_is_a_clear_usage_error(monkeypatch):
    monkeypatch.delenv("FRED_API_KEY", raising=False)
    with pytest.raises(DataError, match="FRED_API_KEY"):
        load_series("fred")
    monkeypatch.setitem(sys.modules, "fredapi", None)  # import fails as if not installed
    with pytest.raises(MissingExtraError, match=r"needs the 'fred' extra .*: pip install 'pglab\[fred\]'"):
        load_series("fred")
