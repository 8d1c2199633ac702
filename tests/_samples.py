"""Real tool-output samples shared by several test modules. Plain data with no imports, so a module that uses a
sample never inherits another module's requirements (a test module that needs a browser skips itself when
Playwright is missing; importing a sample from it used to skip the importer too, in silence)."""

# Playwright's ARIA snapshot (`page.aria_snapshot(mode="ai")`: [ref=...] and [cursor=pointer]) as
# harness/envs/odysseys/browser.py reads it; tests/test_odysseys_browser.py checks how it is rendered.
ARIA_SNAPSHOT = """\
- generic [active] [ref=e1]:
  - 'heading "Title: sub" [level=1] [ref=e2]'
  - generic [ref=e3]:
    - link "Cart" [ref=e4] [cursor=pointer]:
      - /url: /cart.html
      - img "cart icon" [ref=e5]
    - paragraph [ref=e6]: "Text with: colon"
  - textbox "Search" [ref=e7]:
    - /placeholder: Find things
  - combobox "Qty" [ref=e8]:
    - option "1" [selected]
  - generic [ref=e9] [cursor=pointer]:
    - generic [ref=e10] [cursor=pointer]: Clickable card
  - checkbox "Gift" [checked] [ref=e11]
"""
