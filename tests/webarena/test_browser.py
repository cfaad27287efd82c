"""BrowserSession on the live site: deterministic observations, stable ids, actions and their errors, tabs."""
from __future__ import annotations

import numpy as np
import pytest

from envs.webarena.make_tasks import find_id
from envs.webarena.site import CUSTOMER_EMAIL, CUSTOMER_PASSWORD

pytestmark = pytest.mark.browser
LOGIN = (CUSTOMER_EMAIL, CUSTOMER_PASSWORD)


@pytest.fixture()
def fresh(site, browser):
    site.reset_db()
    browser.new_context(site.base_url, (1280, 720), LOGIN)
    return browser


def test_identical_states_give_identical_pixels_and_axtree(fresh, site):
    fresh.goto("/product/5")
    a = fresh.observe()
    assert a["screenshot"].shape == (720, 1280, 3) and a["screenshot"].dtype == np.uint8
    b = fresh.observe()
    assert np.array_equal(a["screenshot"], b["screenshot"])
    assert a["axtree"] == b["axtree"]
    # a brand-new context (new cookies, new renderer) on the same state gives the same pixels and ids
    fresh.new_context(site.base_url, (1280, 720), LOGIN)
    fresh.goto("/product/5")
    c = fresh.observe()
    assert np.array_equal(a["screenshot"], c["screenshot"])
    assert a["axtree"] == c["axtree"]


def test_focused_text_field_screenshot_is_stable(fresh):
    fresh.goto("/product/5")
    obs = fresh.observe()
    err = fresh.execute(f"click [{find_id(obs['axtree'], 'textbox', 'Summary')}]")
    assert err == ""
    shots = [fresh.observe()["screenshot"] for _ in range(3)]  # caret blink must not show
    assert all(np.array_equal(shots[0], s) for s in shots[1:])



@pytest.mark.parametrize("page", ["plain", "focused", "animated", "frames"])
def test_screenshot_matches_playwrights_styled_shot_and_leaves_the_dom_alone(fresh, page):
    import io

    from PIL import Image

    from envs.webarena.browser import SCREENSHOT_CSS

    fresh.goto("/product/5")
    if page == "focused":
        fresh.execute(f"click [{find_id(fresh.observe()['axtree'], 'textbox', 'Summary')}]")
    elif page == "animated":
        fresh.page.set_content("<style>@keyframes k{from{opacity:0}to{opacity:1}} p{animation:k 3s infinite;"
                               "transition:all 2s}</style><p>pulsing</p>")
    elif page == "frames":
        fresh.page.set_content("<p>outer</p><iframe srcdoc='<input autofocus value=inner>'></iframe>")
    dom = "[document.querySelectorAll('*').length, document.adoptedStyleSheets.length]"
    before = fresh.page.evaluate(dom)
    ours = np.asarray(Image.open(io.BytesIO(fresh.screenshot_png())).convert("RGB"))
    assert fresh.page.evaluate(dom) == before
    playwright = np.asarray(Image.open(io.BytesIO(
        fresh.page.screenshot(type="png", style=SCREENSHOT_CSS))).convert("RGB"))
    assert np.array_equal(ours, playwright)
    if page == "animated":  # the style did apply: unstyled, the animation shows (a caret blinks, so not that)
        assert not np.array_equal(ours, np.asarray(Image.open(io.BytesIO(
            fresh.page.screenshot(type="png"))).convert("RGB")))

def test_axtree_has_webarena_lines_and_dom_order_ids(fresh):
    fresh.goto("/")
    tree = fresh.observe()["axtree"]
    first = tree.splitlines()[0]
    assert first.startswith("RootWebArea 'One Stop Shop'")
    shoes = int(find_id(tree, "link", "Shoes"))
    baby = int(find_id(tree, "link", "Baby"))
    assert baby < shoes  # nav lists categories alphabetically; ids follow DOM order
    assert "\t[" in tree


def test_click_by_id_navigates(fresh, site):
    fresh.goto("/")
    tree = fresh.observe()["axtree"]
    assert fresh.execute(f"click [{find_id(tree, 'link', 'Shoes')}]") == ""
    assert fresh.page.url == site.base_url + "/category/shoes"
    assert fresh.execute("go_back") == ""
    assert fresh.page.url == site.base_url + "/"
    assert fresh.execute("go_forward") == ""
    assert fresh.page.url.endswith("/category/shoes")


def test_unknown_id_is_an_error_and_changes_nothing(fresh):
    fresh.goto("/cart")
    before = fresh.observe()
    err = fresh.execute("click [99999]")
    assert "no element with id [99999]" in err
    after = fresh.observe()
    assert after["url"] == before["url"] and after["axtree"] == before["axtree"]
    assert np.array_equal(after["screenshot"], before["screenshot"])


def test_invalid_action_text_is_reported_not_raised(fresh):
    fresh.goto("/")
    assert fresh.execute("clik [3]").startswith("invalid action: unknown action 'clik'")
    assert fresh.execute("type [3]").startswith("invalid action")


def test_type_with_enter_submits_and_select_rejects_unknown_option(fresh):
    fresh.goto("/")
    tree = fresh.observe()["axtree"]
    assert fresh.execute(f"type [{find_id(tree, 'searchbox', 'Search')}] [yoga mat] [1]") == ""
    assert "/search?q=yoga+mat" in fresh.page.url
    tree = fresh.observe()["axtree"]
    sort_id = find_id(tree, "combobox", "Sort By")
    err = fresh.execute(f"select_option('{sort_id}', 'Colour')")
    assert "no option 'Colour'" in err and "'Price'" in err
    assert fresh.execute(f"select_option('{sort_id}', 'price')") == ""  # value works as well as label
    err = fresh.execute(f"select_option('{find_id(tree, 'button', 'Apply')}', 'x')")
    assert "not a <select>" in err


def test_scroll_changes_view_and_scrolling_back_restores_pixels(fresh):
    fresh.goto("/category/shoes?limit=48")
    top = fresh.observe()["screenshot"]
    assert fresh.execute("scroll [down]") == ""
    down = fresh.observe()["screenshot"]
    assert not np.array_equal(top, down)
    assert fresh.execute("scroll [up]") == ""
    assert np.array_equal(fresh.observe()["screenshot"], top)
    assert fresh.execute("scroll(0, 300)") == ""
    assert fresh.page.evaluate("window.scrollY") == 300


def test_tabs_open_focus_and_close(fresh, site):
    fresh.goto("/")
    assert fresh.execute("new_tab") == ""
    assert fresh.execute(f"goto [{site.base_url}/cart]") == ""
    obs = fresh.observe()
    assert obs["open_pages_urls"] == [site.base_url + "/", site.base_url + "/cart"]
    assert obs["active_page_index"] == 1
    assert fresh.execute("tab_focus [0]") == ""
    assert fresh.observe()["url"] == site.base_url + "/"
    assert "there are 2 tabs" in fresh.execute("tab_focus [5]")
    assert fresh.execute("tab_focus [1]") == "" and fresh.execute("close_tab") == ""
    assert fresh.observe()["open_pages_urls"] == [site.base_url + "/"]


def test_login_state_and_hover_press(fresh):
    fresh.goto("/")
    tree = fresh.observe()["axtree"]
    assert "Welcome, Emma Lopez!" in tree
    assert fresh.execute(f"hover [{find_id(tree, 'link', 'My Account')}]") == ""
    assert fresh.execute(f"click [{find_id(tree, 'searchbox', 'Search')}]") == ""
    assert fresh.execute("press [Enter]") == ""
    assert "/search" in fresh.page.url


def test_program_html_evaluation_leaves_agent_tabs_alone(site, browser):
    from envs.webarena.episode import Episode
    from envs.webarena.judge import judge_episode
    from envs.webarena.tasks import load_task, workspace_task

    site.reset_db()
    task = load_task(35)  # wishlist add, judged on /wishlist by program_html
    ep = Episode(browser, **workspace_task(task))
    before = ep.reset()
    assert judge_episode(task, ep, "") == 0.0
    after = browser.observe()
    assert after["open_pages_urls"] == before["open_pages_urls"]
    assert after["url"] == before["url"]
    assert np.array_equal(after["screenshot"], before["screenshot"])


def test_a_goto_off_the_site_is_blocked_and_the_page_still_observes(fresh):
    """The agent's goto off the site is refused; a navigation off the site by any other way is aborted, and the
    error page that commits right after must not break the observation (it raced with numbering the elements:
    'Execution context was destroyed')."""
    fresh.goto("/product/5")
    for _ in range(3):
        assert "only the site's pages" in fresh.execute("goto [http://127.0.0.1:9/]")
        with pytest.raises(Exception, match="ERR_FAILED"):
            fresh.goto("http://127.0.0.1:9/")  # not the agent's action: the context's route aborts it
        obs = fresh.observe()
        assert obs["screenshot"].shape == (720, 1280, 3) and isinstance(obs["axtree"], str)
        fresh.goto("/product/5")
