// Playground (every role): chat with any chat model the signed-in key may use, streamed, with
// the request's latency, time to first token and token counts. Embedding models cannot chat:
// they are listed apart, with the endpoint that serves them.
import { api, streamChat } from "../api.js";
import { ErrorNote, Field, Loaded, html, useLoad, useRef, useState } from "../ui.js";

export function Playground({ me }) {
  const [state] = useLoad(() => api("/v1/models"));
  const [form, set] = useState({ model: "", prompt: "", max_tokens: "64", temperature: "0" });
  const [answer, setAnswer] = useState("");
  const [stats, setStats] = useState(null);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const abort = useRef(null);
  const send = async (e, models) => {
    e.preventDefault(); setError(null); setAnswer(""); setStats(null); setBusy(true);
    const started = performance.now();
    let first = null, text = "";
    abort.current = new AbortController();
    try {
      const usage = await streamChat({ model: form.model || models[0], max_tokens: Number(form.max_tokens),
        temperature: Number(form.temperature), messages: [{ role: "user", content: form.prompt }] },
      (delta) => { if (first === null) first = performance.now(); text += delta; setAnswer(text); }, abort.current.signal);
      setStats({ latency: performance.now() - started, ttft: first === null ? null : first - started, usage });
    } catch (err) { setError(err); } finally { setBusy(false); }
  };
  return html`<${Loaded} state=${state}>${(list) => {
    const usable = list.data.filter((m) => !me.models || me.models.includes(m.id));
    const ids = (task) => usable.filter((m) => (m.inferplane_task || "chat") === task).map((m) => m.id);
    const models = ids("chat"), embeddings = ids("embedding");
    return html`<form class="playground" aria-label="Chat" onSubmit=${(e) => send(e, models)}>
      ${embeddings.length ? html`<p class="muted" data-testid="embedding-models">Embedding models
        (POST /v1/embeddings, not chat): ${embeddings.join(", ")}</p>` : null}
      <div class="grid">
        <${Field} label="Model" name="model" form=${form} set=${set} options=${models} />
        <${Field} label="Max tokens" name="max_tokens" type="number" form=${form} set=${set} />
        <${Field} label="Temperature" name="temperature" type="number" form=${form} set=${set} />
      </div>
      <div class="field"><label for="prompt">Message</label>
        <textarea id="prompt" rows="4" required value=${form.prompt} onInput=${(e) => set({ ...form, prompt: e.target.value })}></textarea></div>
      <button type="submit" disabled=${busy}>${busy ? "Streaming…" : "Send"}</button>
      ${busy ? html`<button type="button" onClick=${() => abort.current.abort()}>Stop</button>` : null}
    </form>
    <${ErrorNote} error=${error} />
    <section class="card" aria-live="polite"><h2>Answer</h2><pre data-testid="answer" class="answer">${answer}</pre>
      ${stats ? html`<p data-testid="stats">latency ${Math.round(stats.latency)} ms · TTFT ${stats.ttft === null ? "–" : Math.round(stats.ttft)} ms
        ${stats.usage ? ` · ${stats.usage.prompt_tokens} prompt + ${stats.usage.completion_tokens} completion tokens` : ""}</p>` : null}</section>`;
  }}<//>`;
}
