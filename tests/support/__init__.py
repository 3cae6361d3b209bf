"""Helpers shared by the tests (tests/ is on pytest's `pythonpath`: `from support.net import
free_port`). Fixtures stay in the conftest.py files; these are the plain modules behind them.

- `net`: a free TCP port on 127.0.0.1.
- `processes`: real processes (a Redis server, `llmrl` services, a service stack's parts) on
  free ports, `child_env` (the environment of every child), `wait_until`.
- `tiny_corridor`: the TinyCorridor env (orchestrator, episode-driver tests and the bench);
  child processes load it as the plugin `support.tiny_corridor`.
- `sim_envs`: small registered envs of the simulator's tests (SimTestCorridor, SimTestSkills,
  SimTestSlider); a server process loads it as the plugin `support.sim_envs`.
- `sim_server`: a real simulator server process with the `sim_envs` plugin.
- `world_rollouts`: seeded random rollouts of batched worlds and their exact comparison.
- `housekeep`: a tiny hand-built Housekeep house and the real data directory.
- `tiny_llm`: the tiny random Llama (SmolLM2's tokenizer) and gateway settings serving it.
- `fake_provider`: an OpenAI-compatible provider that can be told to misbehave (the
  gateway's remote backend).
- `openai_standin`: the OpenAI files, fine-tuning and chat endpoints (learner, annotator,
  llm-personalize with finetune_backend=openai).
- `scripted_llm`: a chat server answering from a script and recording the prompts.
"""
