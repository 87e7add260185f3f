"""The context vector a policy sees: ``SuggestionOffered.context`` under ``sim-context@1``.

Every feature is something a real IDE client can compute before it decides; the simulator's hidden
model computes acceptance from the same float32 values, so a learned
policy over ``context`` can recover who accepts. Positions never change within a spec version.

===  ==========================  ===================================================================
pos  feature                     meaning (distribution)
===  ==========================  ===================================================================
0    prefix_log_chars            code before the cursor, standardised ln(chars) (N(0, 1))
1    suggestion_log_chars        (ln(suggestion_chars) - mean_log_chars) / sigma_log_chars
2    model_confidence            the serving model's mean token log-prob, standardised (N(0, 1))
3    at_line_end                 1 if the cursor is at the end of its line
4    typing_speed                recent chars/s, standardised (user mean + N(0, 1) per request)
5    log_seconds_since_accept    time since the user's last acceptance, standardised (N(0, 1))
6    in_comment                  1 if the cursor is inside a comment or string
7    invoked                     1 if the user explicitly asked (trigger INVOKED)
8    user_accept_prior           the client's estimate of the user's acceptance logit offset
9    language_accept_prior       the fleet's historical acceptance logit offset of the language
===  ==========================  ===================================================================
"""

CONTEXT_SPEC = "sim-context@1"
FEATURES: tuple[str, ...] = (
    "prefix_log_chars",
    "suggestion_log_chars",
    "model_confidence",
    "at_line_end",
    "typing_speed",
    "log_seconds_since_accept",
    "in_comment",
    "invoked",
    "user_accept_prior",
    "language_accept_prior",
)
CONTEXT_DIM = len(FEATURES)
INDEX = {name: i for i, name in enumerate(FEATURES)}
