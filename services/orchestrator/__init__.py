"""Runs, queues and rollout workers (episodes themselves are played by `llmrl.agents`).

episode_worker.py  consumer of the jobs queue (rollout workers and embedded mode)
executors.py       where jobs are played: in-process (embedded) or via Redis (service)
runner.py          drives a run through its recipe's phases, resumably
embedded.py        `llmrl run`                  manager.py / service.py  the REST service
worker.py          `llmrl worker`               launcher.py   `llmrl up`
rest_client.py     `llmrl submit|status|cancel`
"""
