"""WebArena's judging helpers (`evaluation_harness/helper_functions.py`), restated: what a
program_html target's `func:` URL or locator calls. WebArena `eval`s the expression after putting
the last page's URL for `__last_url__` (a URL) or the page for `__page__` (a locator); here the
expression is parsed (a call of one of these functions, its arguments literals or `__page__`)
and never evaluated as code.

- reddit_get_post_url(url): the post's URL, `scheme://host/f/<forum>/<post id>/`, from a post's or a
  comment's URL (any other URL as it is);
- gitlab_get_project_memeber_role(page, account): the role shown beside `@account` on a GitLab
  project's members page ("" when the page has none);
- shopping_get_latest_order_url(): the newest order's admin page, through the shop's REST API
  (Magento: an admin token for env_config.py's `shopping_site_admin` account, then /rest/V1/orders
  sorted by created_at);
- shopping_get_sku_latest_review_author(sku) / _rating(sku): the last review's nickname / its first
  rating's percent, through /rest/V1/products/<sku>/reviews ("" when there is none).

A REST answer other than 200 fails WebArena's assertion there (an error for the task); here it is
a `HelperError` that ends the task in an error the same way."""

from __future__ import annotations

import ast
import json
import urllib.parse
import urllib.request
from typing import Any, Callable

from easylemur.eval.benchmarks.published import PublishedFilesError, RepoFiles, assigned
from easylemur.eval.benchmarks.webarena.files import ENV_CONFIG

TIMEOUT = 60.0


class HelperError(ValueError):
    """A helper's call that WebArena's own would fail (a malformed expression, a REST error)."""


def reddit_get_post_url(url: str) -> str:
    parsed = urllib.parse.urlparse(url)
    parts = parsed.path.split("/")
    if len(parts) < 4 or parts[1] != "f":
        return url
    return f"{parsed.scheme}://{parsed.netloc}/f/{parts[2]}/{parts[3]}/"


_MEMBER_ROLE_JS = """(account) => {
    const names = document.querySelectorAll("td[data-label='Account'] span.gl-avatar-labeled-sublabel");
    let index = -1;
    for (let i = 0; i < names.length; i++) {
        if (names[i].outerText === '@' + account) { index = i; break; }
    }
    return document.querySelectorAll("td.col-max-role span")[index].outerText;
}"""


def gitlab_get_project_memeber_role(page: Any, account_name: str) -> str:
    try:
        return str(page.evaluate(_MEMBER_ROLE_JS, account_name))
    except Exception:  # noqa: BLE001 - WebArena: no such row (or page) is the role ""
        return ""


class Shop:
    """The shop's REST API as WebArena's helpers use it: `base` is the deployment's SHOPPING URL."""

    def __init__(self, base: str, admin: dict):
        self.base, self.admin = base.rstrip("/"), admin

    def _request(self, path: str, *, body: Any = None, token: str = "", query: dict | None = None) -> Any:
        url = f"{self.base}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        req = urllib.request.Request(url, data=data, headers=headers, method="POST" if data is not None else "GET")
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
                return json.loads(r.read())
        except (OSError, ValueError) as e:  # urllib's HTTPError is an OSError
            raise HelperError(f"the shop's REST API at {url}: {e}") from None

    def token(self) -> str:
        return str(self._request("/rest/default/V1/integration/admin/token",
                                 body={"username": self.admin["username"], "password": self.admin["password"]}))

    def latest_order_url(self) -> str:
        query = {"searchCriteria[sortOrders][0][field]": "created_at",
                 "searchCriteria[sortOrders][0][direction]": "DESC", "searchCriteria[pageSize]": "1"}
        order = self._request("/rest/V1/orders", token=self.token(), query=query)["items"][0]
        return f"{self.base}/sales/order/view/order_id/{int(order['increment_id'])}/"

    def reviews(self, sku: str) -> list:
        return self._request(f"/rest/V1/products/{sku}/reviews", token=self.token())

    def latest_review_author(self, sku: str) -> str:
        reviews = self.reviews(sku)
        return str(reviews[-1]["nickname"]) if reviews else ""

    def latest_review_rating(self, sku: str) -> str:
        reviews = self.reviews(sku)
        if not reviews:
            return ""
        if reviews[0]["ratings"][0]["rating_name"] != "Rating":
            raise HelperError(f"the shop's reviews of {sku}: the first rating is not named Rating")
        return str(reviews[-1]["ratings"][0]["percent"])


def shop_admin(files: RepoFiles) -> dict:
    """env_config.py's ACCOUNTS["shopping_site_admin"]: the account the helpers' token is for."""
    tree, where = files.tree(ENV_CONFIG)
    account = (assigned(tree, where, "", "ACCOUNTS") or {}).get("shopping_site_admin")
    if not isinstance(account, dict) or not {"username", "password"} <= set(account):
        raise PublishedFilesError(f"{where}: ACCOUNTS has no shopping_site_admin username and password")
    return account


def functions(shop: Shop | None) -> dict[str, Callable[..., str]]:
    out: dict[str, Callable[..., str]] = {"reddit_get_post_url": reddit_get_post_url,
                                          "gitlab_get_project_memeber_role": gitlab_get_project_memeber_role}
    if shop is not None:
        out.update(shopping_get_latest_order_url=shop.latest_order_url,
                   shopping_get_sku_latest_review_author=shop.latest_review_author,
                   shopping_get_sku_latest_review_rating=shop.latest_review_rating)
    return out


def call(expr: str, page: Any, helpers: dict[str, Callable[..., str]]) -> str:
    """The value of a `func:` expression (its prefix removed, `__last_url__` already replaced)."""
    try:
        node = ast.parse(expr.strip(), mode="eval").body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.keywords:
            raise ValueError("not a call of a helper by name")
        fn = helpers.get(node.func.id)
        if fn is None:
            raise ValueError(f"no helper {node.func.id}")
        args = [page if isinstance(a, ast.Name) and a.id in ("__page__", "page") else ast.literal_eval(a)
                for a in node.args]
    except (SyntaxError, ValueError) as e:
        raise HelperError(f"func:{expr}: {e}") from None
    return fn(*args)
