<?php
require 'db.php';
$c = require_customer();
$rows = ''; $total = 0.0; $n = 0;
$stmt = db()->prepare('SELECT o.id, p.name, o.qty, p.price * o.qty AS amount FROM orders o JOIN products p '
                      . 'ON p.id = o.product_id WHERE o.customer_id = ? ORDER BY o.id');
$stmt->bind_param('i', $c['id']);
$stmt->execute();
foreach ($stmt->get_result() as $o) {
    $rows .= sprintf('<tr><td>#%d</td><td>%s</td><td>%d</td><td>$%s</td></tr>', $o['id'], htmlspecialchars($o['name']),
                     $o['qty'], $o['amount']);
    $total += $o['amount']; $n++;
}
page('My orders', sprintf('<p id="summary">%d orders, total $%.2f</p><table id="orders">%s</table>', $n, $total, $rows));
