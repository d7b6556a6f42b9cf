"""The generation runtime for causal language models (``backend: "llm"``)."""
