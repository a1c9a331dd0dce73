"""Layer 1: PPO on label traces, in CleanRL's single-file style (cleanrl/ppo.py).

One :class:`Args` dataclass, an ``Agent`` (actor and critic MLPs), and
:func:`train`: one loop from top to bottom (rollout in a synchronous vector
of :class:`~helm_plan.controller.env.LabelEnv`, GAE, clipped surrogate
objective with a clipped value loss and an entropy bonus, several epochs of
minibatches). Deterministic on CPU for a given seed: torch runs on one
thread with deterministic algorithms, every environment is seeded, and the
minibatch order comes from a seeded generator.

The actor is exported to numpy (:func:`export_weights`) for the torch-free
runtime (:mod:`helm_plan.controller.runtime`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions.categorical import Categorical

from helm_plan.config import require_int, require_positive
from helm_plan.controller.dataset import LabelTrace
from helm_plan.controller.env import SHIFTS, LabelEnv, RewardConfig
from helm_plan.controller.features import N_FEATURES
from helm_plan.errors import ConfigError


@dataclass(frozen=True)
class Args:
    """PPO hyper-parameters (CleanRL's names)."""

    seed: int = 0
    """Seed of torch, the environments and the minibatch order."""
    total_timesteps: int = 300_000
    """Environment steps (windows) over the whole training."""
    learning_rate: float = 2.5e-4
    """Adam learning rate (annealed linearly to 0)."""
    num_envs: int = 8
    """Parallel label environments (synchronous, one process)."""
    num_steps: int = 64
    """Steps per environment per rollout."""
    gamma: float = 0.9
    """Discount: a move pays within a few windows."""
    gae_lambda: float = 0.95
    """λ of generalised advantage estimation."""
    num_minibatches: int = 4
    """Minibatches per epoch."""
    update_epochs: int = 4
    """Epochs over each rollout."""
    clip_coef: float = 0.2
    """Surrogate clipping coefficient."""
    ent_coef: float = 0.01
    """Entropy bonus."""
    vf_coef: float = 0.5
    """Value loss weight."""
    max_grad_norm: float = 0.5
    """Gradient clipping norm."""
    hidden: int = 32
    """Units of each of the two hidden layers."""
    reward: RewardConfig = RewardConfig()
    """How a window is scored."""

    def __post_init__(self) -> None:
        for name in ("total_timesteps", "num_envs", "num_steps", "num_minibatches",
                     "update_epochs", "hidden"):  # fmt: skip
            require_int(name, getattr(self, name), 1)
        require_positive("learning_rate", self.learning_rate)
        if self.batch_size < 2 * self.num_minibatches:
            # a one-sample minibatch has no advantage std to normalise by (NaN weights)
            raise ConfigError(
                f"num_minibatches must leave at least 2 samples per minibatch, got "
                f"{self.num_minibatches} minibatches of a {self.batch_size}-sample rollout",
                hint="lower num_minibatches or raise num_envs x num_steps",
            )

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        """Samples per minibatch (when num_minibatches does not divide the batch, the first
        ``batch_size % num_minibatches`` minibatches take one more)."""
        return self.batch_size // self.num_minibatches

    @property
    def num_iterations(self) -> int:
        return max(self.total_timesteps // self.batch_size, 1)


def layer_init(layer: nn.Linear, std: float = float(np.sqrt(2)), bias: float = 0.0) -> nn.Linear:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias)
    return layer


class Agent(nn.Module):
    def __init__(self, n_obs: int, n_act: int, hidden: int) -> None:
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(n_obs, hidden)), nn.Tanh(),
            layer_init(nn.Linear(hidden, hidden)), nn.Tanh(),
            layer_init(nn.Linear(hidden, 1), std=1.0),
        )  # fmt: skip
        self.actor = nn.Sequential(
            layer_init(nn.Linear(n_obs, hidden)), nn.Tanh(),
            layer_init(nn.Linear(hidden, hidden)), nn.Tanh(),
            layer_init(nn.Linear(hidden, n_act), std=0.01),
        )  # fmt: skip

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def get_action_and_value(
        self, x: torch.Tensor, action: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        logits = self.actor(x)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


@dataclass(frozen=True)
class TrainResult:
    """A trained base policy."""

    weights: dict[str, np.ndarray]
    """Actor MLP in numpy (W0, b0, W1, b1, W2, b2; tanh hidden layers)."""
    seconds: float
    """Wall time of the training loop."""
    mean_episode_return: float
    """Mean return of the episodes finished in the last iteration."""


def train(
    traces: list[LabelTrace],
    args: Args | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> TrainResult:
    """Train the base policy on ``traces`` (the module docstring)."""
    args = args or Args()
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    envs = gym.vector.SyncVectorEnv(
        [lambda: LabelEnv(traces, args.reward) for _ in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    agent = Agent(N_FEATURES, len(SHIFTS), args.hidden).double()
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    obs = torch.zeros((args.num_steps, args.num_envs, N_FEATURES), dtype=torch.float64)
    actions = torch.zeros((args.num_steps, args.num_envs), dtype=torch.long)
    logprobs = torch.zeros((args.num_steps, args.num_envs), dtype=torch.float64)
    rewards = torch.zeros((args.num_steps, args.num_envs), dtype=torch.float64)
    dones = torch.zeros((args.num_steps, args.num_envs), dtype=torch.float64)
    values = torch.zeros((args.num_steps, args.num_envs), dtype=torch.float64)

    next_obs_np, _ = envs.reset(seed=args.seed)
    next_obs = torch.as_tensor(next_obs_np)
    next_done = torch.zeros(args.num_envs, dtype=torch.float64)
    returns_done: list[float] = []
    ep_ret = np.zeros(args.num_envs)

    for iteration in range(1, args.num_iterations + 1):
        frac = 1.0 - (iteration - 1.0) / args.num_iterations
        optimizer.param_groups[0]["lr"] = frac * args.learning_rate
        returns_done = []

        for step in range(args.num_steps):
            obs[step] = next_obs
            dones[step] = next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob
            next_obs_np, reward, term, trunc, _ = envs.step(action.numpy())
            done = np.logical_or(term, trunc)
            ep_ret += reward
            returns_done += ep_ret[done].tolist()
            ep_ret[done] = 0.0
            rewards[step] = torch.as_tensor(reward)
            next_obs = torch.as_tensor(next_obs_np)
            next_done = torch.as_tensor(done.astype(np.float64))

        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages, returns = gae(rewards, values, dones, next_value, next_done, args)

        b_obs = obs.reshape((-1, N_FEATURES))
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape(-1)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        b_inds = np.arange(args.batch_size)
        for _epoch in range(args.update_epochs):
            rng.shuffle(b_inds)
            # num_minibatches near-equal parts: a remainder never makes a tiny last minibatch
            for part in np.array_split(b_inds, args.num_minibatches):
                mb_inds = torch.as_tensor(part)
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                    b_obs[mb_inds], b_actions[mb_inds]
                )
                loss = ppo_loss(
                    newlogprob, b_logprobs[mb_inds], entropy, newvalue.view(-1),
                    b_advantages[mb_inds], b_returns[mb_inds], b_values[mb_inds], args,
                )  # fmt: skip
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
        if progress:
            progress(iteration, args.num_iterations)

    envs.close()
    return TrainResult(
        weights=export_weights(agent),
        seconds=time.perf_counter() - t0,
        mean_episode_return=float(np.mean(returns_done)) if returns_done else float("nan"),
    )


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    next_value: torch.Tensor,
    next_done: torch.Tensor,
    args: Args,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016), CleanRL's recursion.

    ``dones[t]`` marks that the observation of step t starts a new episode, i.e. step t−1
    ended one; with same-step autoreset the final step's next observation is the new
    episode's first, so a done step bootstraps nothing. Returns (advantages, returns)."""
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    lastgaelam = torch.zeros(rewards.shape[1], dtype=rewards.dtype)
    for t in reversed(range(num_steps)):
        if t == num_steps - 1:
            nextnonterminal = 1.0 - next_done
            nextvalues = next_value
        else:
            nextnonterminal = 1.0 - dones[t + 1]
            nextvalues = values[t + 1]
        delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
        lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
        advantages[t] = lastgaelam
    return advantages, advantages + values


def ppo_loss(
    newlogprob: torch.Tensor,
    logprob: torch.Tensor,
    entropy: torch.Tensor,
    newvalue: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    args: Args,
) -> torch.Tensor:
    """One minibatch's loss: clipped surrogate (Schulman et al. 2017, eq. 7) on normalised
    advantages, minus the entropy bonus, plus the clipped value loss (CleanRL's)."""
    ratio = (newlogprob - logprob).exp()
    mb_adv = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    pg_loss1 = -mb_adv * ratio
    pg_loss2 = -mb_adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()
    v_unclipped = (newvalue - returns) ** 2
    v_clipped = values + torch.clamp(newvalue - values, -args.clip_coef, args.clip_coef)
    v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - returns) ** 2).mean()
    return pg_loss - args.ent_coef * entropy.mean() + v_loss * args.vf_coef


def export_weights(agent: Agent) -> dict[str, np.ndarray]:
    """The actor's layers as numpy arrays (W as out × in, like torch)."""
    lin = [m for m in agent.actor if isinstance(m, nn.Linear)]
    out: dict[str, np.ndarray] = {}
    for i, m in enumerate(lin):
        out[f"W{i}"] = m.weight.detach().numpy().astype(np.float64).copy()
        out[f"b{i}"] = m.bias.detach().numpy().astype(np.float64).copy()
    return out
