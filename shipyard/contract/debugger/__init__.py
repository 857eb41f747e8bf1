"""What a job's debug hook config means and what the hook writes, shared by the hook in the training
process (shipyard/runtime/debugger/), the spec that validates the config and the trials that read the
tensors back: smdebug's modes, SaveConfig, collections and the storage format. Pure and torch-free."""
