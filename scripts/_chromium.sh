# Sourced by scripts/test: make sure a Chromium is installed for the browser tests of the chat page
# (tests/test_webui.py drives it with Playwright's Python package; Playwright's own browser
# download is not used). Debian/Ubuntu: apt-get install chromium, as root or through sudo -n.
# Where none can be installed, the browser tests skip and say why.
if [ -z "${LOCALCHAT_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1 \
        && ! command -v chromium-browser >/dev/null 2>&1 && ! command -v google-chrome >/dev/null 2>&1; then
    SUDO=()
    [ "$(id -u)" -eq 0 ] || SUDO=(sudo -n)
    if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" -eq 0 ] || sudo -n true 2>/dev/null; }; then
        echo "localchat: installing Chromium for the browser tests (apt-get install chromium)" >&2
        { "${SUDO[@]}" apt-get install -y -q chromium >&2 \
            || { "${SUDO[@]}" apt-get update -q >&2 && "${SUDO[@]}" apt-get install -y -q chromium >&2; }; } \
            || echo "localchat: could not install Chromium: the browser tests will be skipped" >&2
    else
        echo "localchat: no Chromium and no way to install it here (apt-get as root): the browser tests will be skipped" >&2
    fi
fi
