"""The deployable three-layer controller (DESIGN.md, Controller).

- :mod:`.features`: the one observation function (label tables and live windows);
- :mod:`.dataset`: label traces, the oracle's labels arranged for training;
- :mod:`.env`: Gymnasium environments (``LabelEnv`` on labels, ``NodeEnv`` closed loop);
- :mod:`.ppo`: layer 1, PPO in one CleanRL-style file (torch);
- :mod:`.runtime`: ``Controller.step(features) -> ratio`` with all its layers (one compiled call, :mod:`._kernel`; no torch);
- :mod:`.policy`: the controller and ghost hill climbing as node policies;
- :mod:`.training`: the training set, training and validation behind ``helm-plan train``/``validate``.

Nothing is imported here, so ``import helm_plan.controller.runtime`` loads
neither torch nor gymnasium.
"""
