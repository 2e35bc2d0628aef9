"""Chat templates (``model.chat_template``): how a task's prompts are rendered for an instruct
model.

With ``auto``, a tokenizer that has a chat template gets each text prompt as one user message
and each list of chat messages as it is (after the task's system prompt, if any), rendered with
``apply_chat_template(..., add_generation_prompt=True)`` (:func:`render_task_prompts`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - annotations only (transformers is optional)
    from transformers import PreTrainedTokenizerBase

    from bestk.tasks import Task

__all__ = ["has_chat_template", "chat_prompt", "render_messages", "chat_messages",
           "render_task_prompts"]


# -- chat templates -----------------------------------------------------------------------------
def has_chat_template(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether ``tokenizer`` carries a chat template."""
    return bool(getattr(tokenizer, "chat_template", None))


def chat_prompt(tokenizer: PreTrainedTokenizerBase, text: str) -> str:
    """``text`` as one user message, rendered by the tokenizer's chat template with the
    generation prompt appended (the text an instruct model continues)."""
    return tokenizer.apply_chat_template(  # type: ignore[return-value]  # tokenize=False: text
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )


def render_messages(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]]) -> str:
    """A list of chat messages rendered by the tokenizer's chat template as the text the model
    continues: with the generation prompt appended, or, when the last message is the
    assistant's (a prefilled reply), continuing that message (as TRL renders prompts)."""
    prefilled = messages[-1]["role"] == "assistant"
    return tokenizer.apply_chat_template(  # type: ignore[return-value]  # tokenize=False: text
        messages, tokenize=False, add_generation_prompt=not prefilled,
        continue_final_message=prefilled,
    )


def chat_messages(prompt: str | list[dict[str, str]],
                  system_prompt: str | None = None) -> list[dict[str, str]]:
    """The chat messages of a task prompt: a text prompt as one user message, a list of
    messages as it is; ``system_prompt`` (when given) first, unless the messages already
    begin with a system message of their own (which is kept)."""
    messages = ([{"role": "user", "content": prompt}] if isinstance(prompt, str)
                else [dict(m) for m in prompt])
    if system_prompt and not any(m["role"] == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


def render_task_prompts(task: Task, tokenizer: PreTrainedTokenizerBase, mode: str) -> bool:
    """Apply ``model.chat_template`` to every example of ``task`` in place.

    ``mode`` ``"auto"``: when the tokenizer has a chat template, each example's ``prompt``
    becomes the rendering (:func:`render_messages`) of its chat messages
    (:func:`chat_messages`: a text prompt as one user message, TRL-style message lists as they
    are, ``task.system_prompt`` first when set); the user's own text is kept as
    ``user_prompt`` (the content of the last user message of a message list) and, for message
    lists and system prompts, the messages rendered as ``prompt_messages``. A reward function
    receives all of them (``prompt`` is what the model saw). A plain text prompt without a
    system prompt is exactly :func:`chat_prompt` of it. ``"none"``: nothing changes.

    Returns whether the template was applied. Raises ``ValueError`` (one line) when
    ``mode`` is neither, or when the task has message-list prompts or a system prompt but
    no chat template is applied (the model could not be shown them).
    """
    if mode not in ("auto", "none"):
        raise ValueError(f"model.chat_template must be auto or none, got {mode!r}")
    examples = [ex for ex in [*task.train, *task.eval] if "user_prompt" not in ex]  # idempotent
    system = getattr(task, "system_prompt", None)
    if mode == "none" or not has_chat_template(tokenizer):
        needs = ("task.system_prompt is set" if system else
                 "prompts are chat messages" if any(isinstance(ex["prompt"], list)
                                                    for ex in examples) else "")
        if needs:
            why = ("model.chat_template is none" if mode == "none"
                   else "the tokenizer has no chat template")
            raise ValueError(f"task {task.name!r}: {needs}, which only a chat template can show "
                             f"the model, but {why}; use an instruct model's tokenizer with "
                             f"model.chat_template auto")
        return False
    for ex in examples:
        prompt = ex["prompt"]
        if isinstance(prompt, str) and not system:
            ex["user_prompt"] = prompt
            ex["prompt"] = chat_prompt(tokenizer, prompt)
            continue
        messages = chat_messages(prompt, system)
        users = [m["content"] for m in messages if m["role"] == "user"]
        ex["user_prompt"] = prompt if isinstance(prompt, str) else (users[-1] if users else "")
        ex["prompt_messages"] = messages
        ex["prompt"] = render_messages(tokenizer, messages)
    return True
