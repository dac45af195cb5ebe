"""Client APIs served by translation to chat completions: OpenAI Responses, Anthropic Messages.

Each `*_translate` module is pure (dicts in, dicts out): request -> chat body, chat response ->
the API's object, and a stream translator turning chat chunks into the API's typed events.
"""
