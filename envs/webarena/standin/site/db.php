<?php
// One connection per request (kept: a statement does not keep its connection open), over loopback TCP to the
// MariaDB of the same image; the customer in the PHP session.
function db(): mysqli {
    static $db = null;
    if ($db === null) {
        mysqli_report(MYSQLI_REPORT_ERROR | MYSQLI_REPORT_STRICT);
        $db = new mysqli('127.0.0.1', 'shop', 'shop', 'shop', 3306);
    }
    return $db;
}
function customer(): ?array {
    if (session_status() !== PHP_SESSION_ACTIVE) session_start();
    if (!isset($_SESSION['customer_id'])) return null;
    $stmt = db()->prepare('SELECT id, name FROM customers WHERE id = ?');
    $stmt->bind_param('i', $_SESSION['customer_id']);
    $stmt->execute();
    return $stmt->get_result()->fetch_assoc();
}
function require_customer(): array {
    $c = customer();
    if ($c === null) { header('Location: /customer/account/login/', true, 302); exit; }
    return $c;
}
function page(string $title, string $body): void {
    $c = customer();
    $who = $c === null ? '<a href="/customer/account/login/">Sign In</a>'
        : 'Welcome, ' . htmlspecialchars($c['name']) . ' | <a href="/customer/account/logout/">Sign Out</a>';
    header('Content-Type: text/html; charset=utf-8');
    echo "<!doctype html><html><head><title>" . htmlspecialchars($title) . "</title></head><body>"
       . "<nav><a href=\"/\">Products</a> | <a href=\"/orders.php\">My orders</a> | $who</nav>"
       . "<h1>" . htmlspecialchars($title) . "</h1>$body</body></html>";
}
