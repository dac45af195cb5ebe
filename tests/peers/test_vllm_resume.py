"""A vLLM engine killed mid-stream: the gateway continues the stream on the builtin engine.
(Kills the session's vLLM: this file sorts after every other vLLM test.)"""
from __future__ import annotations

import orjson

from common.metric_names import Metric
from tests.peers.conftest import backend_of, gateway, model_of

QUESTION = [{"role": "user", "content": "Write a short poem about the sea."}]


def test_killed_vllm_stream_resumes_on_the_builtin_engine(vllm, builtin):
    models = [model_of([backend_of(vllm, "vllm-0"), backend_of(builtin, "builtin-0")])]
    with gateway(models, resume_streams="greedy") as gw, gw.client(timeout=300) as c:
        body = {"model": "m", "messages": QUESTION, "max_tokens": 40, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}}
        events, text_at_kill = [], None
        # round robin: the first request goes to the first backend, vLLM
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(line[6:])
                contents = [orjson.loads(e)["choices"][0]["delta"].get("content") or ""
                            for e in events if e != "[DONE]" and orjson.loads(e)["choices"]]
                if text_at_kill is None and len(contents) >= 6:
                    text_at_kill = "".join(contents)
                    vllm.kill()
        assert not vllm.alive() and text_at_kill
        assert events[-1] == "[DONE]"
        chunks = [orjson.loads(e) for e in events[:-1]]
        assert not any("error" in chunk for chunk in chunks)
        text = "".join(ch["choices"][0]["delta"].get("content") or ""
                       for ch in chunks if ch["choices"])
        assert text.startswith(text_at_kill) and len(text) > len(text_at_kill)
        usage = chunks[-1]["usage"]
        assert usage["completion_tokens"] > 6
        metrics = c.get("/metrics").text
        assert f'{Metric.STREAM_RESUMES.total}{{' in metrics
