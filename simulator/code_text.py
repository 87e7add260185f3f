"""Plausible suggestion text per language, with occasional planted fake secrets.

A suggestion is a slice of a per-language corpus of ordinary code lines, cut to the request's
exact length, so ``suggestion_chars`` always equals ``len(suggestion_text)``. A planted secret
replaces the start of the slice with a credential-looking assignment (same total length), in the
formats the SDK's redaction must catch: an AWS access key id (``AKIA`` + 16) or a GitHub token
(``ghp_`` + 36). The values are random and never real.
"""

from __future__ import annotations

import numpy as np

_LINES: dict[str, tuple[str, ...]] = {
    "python": (
        "def load_rows(path: Path) -> list[dict[str, str]]:",
        "    with path.open(encoding='utf-8') as handle:",
        "        return list(csv.DictReader(handle))",
        "for index, row in enumerate(rows):",
        "    totals[row['region']] += float(row['amount'])",
        "if not response.ok:",
        "    raise RuntimeError(f'request failed: {response.status_code}')",
        "result = sorted(items, key=lambda item: item.score, reverse=True)",
        "logger.info('processed %d records in %.2fs', count, elapsed)",
        "return {name: value for name, value in pairs if value is not None}",
    ),
    "typescript": (
        "export async function fetchUser(id: string): Promise<User> {",
        "  const response = await fetch(`/api/users/${id}`);",
        "  if (!response.ok) throw new Error(`status ${response.status}`);",
        "  return (await response.json()) as User;",
        "}",
        "const totals = orders.reduce((sum, order) => sum + order.amount, 0);",
        "interface Props { title: string; onClose: () => void }",
        "export const selectVisible = (state: State) => state.items.filter((i) => i.visible);",
    ),
    "javascript": (
        "function debounce(fn, waitMs) {",
        "  let timer;",
        "  return (...args) => {",
        "    clearTimeout(timer);",
        "    timer = setTimeout(() => fn(...args), waitMs);",
        "  };",
        "}",
        "const names = users.map((user) => user.name).filter(Boolean);",
        "module.exports = { debounce, parseQuery };",
        "app.get('/health', (req, res) => res.json({ status: 'ok' }));",
    ),
    "java": (
        "public List<Order> findOpenOrders(Customer customer) {",
        "    return orders.stream()",
        "        .filter(order -> order.customerId().equals(customer.id()))",
        "        .filter(Order::isOpen)",
        "        .collect(Collectors.toList());",
        "}",
        "@Override",
        'public String toString() { return "Point(" + x + ", " + y + ")"; }',
    ),
    "go": (
        "func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {",
        '\tw.Header().Set("Content-Type", "application/json")',
        "\tif err := json.NewEncoder(w).Encode(status); err != nil {",
        "\t\thttp.Error(w, err.Error(), http.StatusInternalServerError)",
        "\t}",
        "}",
        "for i, item := range items {",
        "\ttotals[item.Key] += item.Value * float64(i+1)",
    ),
    "rust": (
        "pub fn parse_config(text: &str) -> Result<Config, ConfigError> {",
        "    let value: toml::Value = text.parse()?;",
        '    let name = value.get("name").and_then(|v| v.as_str()).unwrap_or("default");',
        "    Ok(Config { name: name.to_owned(), ..Default::default() })",
        "}",
        "impl fmt::Display for Point {",
        "    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {",
        '        write!(f, "({}, {})", self.x, self.y)',
        "    }",
    ),
    "cpp": (
        "std::vector<int> sorted_unique(std::vector<int> values) {",
        "    std::sort(values.begin(), values.end());",
        "    values.erase(std::unique(values.begin(), values.end()), values.end());",
        "    return values;",
        "}",
        "for (const auto& [key, value] : table) {",
        "    std::cout << key << \": \" << value << '\\n';",
    ),
}
_FALLBACK = _LINES["python"]  # for configured languages the corpus does not know

_AWS_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_TOKEN_ALPHABET = _AWS_ALPHABET[:26] + "abcdefghijklmnopqrstuvwxyz0123456789"  # letters, digits
# The longest planted line (the GitHub token assignment) is 58 chars; a secret suggestion is at
# least this long so the secret is never cut.
SECRET_MIN_CHARS = 64


class CodeTextSource:
    """Code fragments of a requested length for each configured language."""

    def __init__(self, languages: tuple[str, ...], max_chars: int) -> None:
        # Corpora are built from a fixed seed: they are constants, not part of a run's draws.
        rng = np.random.default_rng(0)
        self._corpus: dict[str, str] = {}
        for language in languages:
            lines = _LINES.get(language, _FALLBACK)
            parts: list[str] = []
            length = 0
            while length < 2 * max_chars:
                for index in rng.permutation(len(lines)):
                    parts.append(lines[index])
                    length += len(lines[index]) + 1
            self._corpus[language] = "\n".join(parts)

    def text(self, language: str, offset_u: float, chars: int, secret: str | None) -> str:
        """``chars`` characters of ``language`` code starting at fraction ``offset_u`` of the
        corpus, beginning with ``secret`` (a planted line) when given."""
        corpus = self._corpus[language]
        start = int(offset_u * (len(corpus) - chars))
        fragment = corpus[start : start + chars]
        if secret is None:
            return fragment
        return (secret + fragment)[:chars]


def fake_secret(rng: np.random.Generator) -> str:
    """A planted credential line: an AWS access key id or a GitHub token, half and half."""
    if rng.random() < 0.5:
        key = "".join(_AWS_ALPHABET[i] for i in rng.integers(0, len(_AWS_ALPHABET), 16))
        return f'aws_access_key_id = "AKIA{key}"\n'
    token = "".join(_TOKEN_ALPHABET[i] for i in rng.integers(0, len(_TOKEN_ALPHABET), 36))
    return f'GITHUB_TOKEN = "ghp_{token}"\n'
