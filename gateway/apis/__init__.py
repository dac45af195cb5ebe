"""Client APIs the gateway serves, one folder each (router, endpoint, translate, stream).

Every API is an `Endpoint` on an `EngineProtocol` (endpoint.py). Chat and completions go to
the engine as they are; Responses and Anthropic Messages translate to chat (their
`translate.py` is pure: dicts in, dicts out) and back (`stream.py`: chat chunks into the
API's typed events).
"""
