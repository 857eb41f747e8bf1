"""The debugger inside an instance: the hook that saves tensors in every training process (hook.py,
installed by the injected sitecustomize) and the agent's part (agent.py: the hook config file, the upload
of the tensors). Imports nothing of the SDK, the rules or pydantic (tests/project/test_imports.py)."""
