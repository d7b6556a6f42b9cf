"""The OpenAI-compatible API (``/v1``): models, completions, chat completions and embeddings
over models in the repository, with OpenAI's request, response and error shapes."""
