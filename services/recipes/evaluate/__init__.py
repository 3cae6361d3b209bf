"""`evaluate`: N episodes of a planner on an environment → success, return, length, LLM use.

The simplest recipe and the template for the others: one phase plays the episodes (resumable
episode by episode), one phase turns the stored records into the results table, JSON and a
plot. `llmrl run evaluate env=SimpleDoorKey planner=oracle episodes=20 --out runs/demo`.
"""
